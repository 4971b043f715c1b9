// LayerNorm forward/backward, parallel over rows; weight and bias gradients are parallel over
// column blocks so that their sums over rows have a fixed order.
#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/parallel_if.h"

namespace tensorpar {
namespace {

// Below this many elements of work a loop runs on the calling thread: waking a team costs
// more than it saves (decode steps, small test sizes).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

}  // namespace

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps) {
  TP_CHECK(N >= 0 && C > 0, "[layernorm_forward] sizes: got N=", N, " C=", C,
           ", expected N >= 0 and C > 0");
  TP_CHECK(eps >= 0, "[layernorm_forward] eps: got ", eps, ", expected >= 0");
  parallel_if(N * C > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;  // (C)
      float* o = out + n * C;        // (C)
      // Statistics in double: a row of values far from zero would lose digits in a float sum.
      double s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t c = 0; c < C; ++c) s += x[c];
      const float m = static_cast<float>(s / static_cast<double>(C));
      // Two passes (mean, then squared deviations) avoid the cancellation of E[x^2] - m^2.
      double v = 0;
#pragma omp simd reduction(+ : v)
      for (int64_t c = 0; c < C; ++c) v += static_cast<double>((x[c] - m) * (x[c] - m));
      const float r = static_cast<float>(1.0 / std::sqrt(v / static_cast<double>(C) + eps));
      if (bias)
        for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * r * weight[c] + bias[c];
      else
        for (int64_t c = 0; c < C; ++c) o[c] = (x[c] - m) * r * weight[c];
      if (mean) mean[n] = m;
      if (rstd) rstd[n] = r;
    }
  });
}

void layernorm_backward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C) {
  TP_CHECK(N >= 0 && C > 0, "[layernorm_backward] sizes: got N=", N, " C=", C,
           ", expected N >= 0 and C > 0");
  const float inv_c = 1.0f / static_cast<float>(C);
  if (d_inp) {
    // dx = r * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * w, xhat = (x - m) * r.
    parallel_if(N * C > kMinParallelWork, [&] {
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        const float* x = inp + n * C;
        const float* dy = d_out + n * C;
        float* dx = d_inp + n * C;
        const float m = mean[n], r = rstd[n];
        float sum_g = 0, sum_gx = 0;
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (int64_t c = 0; c < C; ++c) {
          const float g = dy[c] * weight[c];
          sum_g += g;
          sum_gx += g * (x[c] - m) * r;
        }
        const float mg = sum_g * inv_c, mgx = sum_gx * inv_c;
        for (int64_t c = 0; c < C; ++c) {
          const float xhat = (x[c] - m) * r;
          dx[c] += r * (dy[c] * weight[c] - mg - xhat * mgx);
        }
      }
    });
  }
  if (d_weight || d_bias) {
    constexpr int64_t kBlock = 64;
    const int64_t n_blocks = (C + kBlock - 1) / kBlock;
    parallel_if(N * C > kMinParallelWork, [&] {
#pragma omp for schedule(static)
      for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t c0 = b * kBlock, len = std::min(C, c0 + kBlock) - c0;
        float acc_w[kBlock] = {}, acc_b[kBlock] = {};
        for (int64_t n = 0; n < N; ++n) {
          const float* x = inp + n * C + c0;
          const float* dy = d_out + n * C + c0;
          const float m = mean[n], r = rstd[n];
          for (int64_t c = 0; c < len; ++c) {
            acc_w[c] += dy[c] * (x[c] - m) * r;
            acc_b[c] += dy[c];
          }
        }
        for (int64_t c = 0; c < len; ++c) {
          if (d_weight) d_weight[c0 + c] += acc_w[c];
          if (d_bias) d_bias[c0 + c] += acc_b[c];
        }
      }
    });
  }
}

}  // namespace tensorpar

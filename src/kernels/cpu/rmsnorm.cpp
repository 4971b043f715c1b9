// RMSNorm forward/backward, parallel over rows; the weight gradient is parallel over column
// blocks so that its sum over rows has a fixed order.
#include "kernels/cpu/rmsnorm.h"

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

void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps) {
  TP_CHECK(N >= 0 && C > 0, "[rmsnorm_forward] sizes: got N=", N, " C=", C,
           ", expected N >= 0 and C > 0");
  TP_CHECK(eps >= 0, "[rmsnorm_forward] eps: got ", eps, ", expected >= 0");
  parallel_if(N * C > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = inp + n * C;  // (C)
      float* o = out + n * C;        // (C)
      double ss = 0;                 // double: long rows would lose digits in a float sum
#pragma omp simd reduction(+ : ss)
      for (int64_t c = 0; c < C; ++c) ss += static_cast<double>(x[c] * x[c]);
      const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(C) + eps));
      for (int64_t c = 0; c < C; ++c) o[c] = x[c] * r * weight[c];
      if (rstd) rstd[n] = r;
    }
  });
}

void rmsnorm_backward(float* d_inp, float* d_weight, const float* d_out, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C) {
  TP_CHECK(N >= 0 && C > 0, "[rmsnorm_backward] sizes: got N=", N, " C=", C,
           ", expected N >= 0 and C > 0");
  if (d_inp) {
    // dx = r * (w*dy) - r^3/C * x * sum(w*dy*x)
    parallel_if(N * C > kMinParallelWork, [&] {
#pragma omp for schedule(static)
      for (int64_t n = 0; n < N; ++n) {
        const float* x = inp + n * C;
        const float* dy = d_out + n * C;
        float* dx = d_inp + n * C;
        const float r = rstd[n];
        float dot = 0;
#pragma omp simd reduction(+ : dot)
        for (int64_t c = 0; c < C; ++c) dot += weight[c] * dy[c] * x[c];
        const float k = r * r * r * dot / static_cast<float>(C);
        for (int64_t c = 0; c < C; ++c) dx[c] += r * weight[c] * dy[c] - k * x[c];
      }
    });
  }
  if (d_weight) {
    constexpr int64_t kBlock = 64;
    const int64_t n_blocks = (C + kBlock - 1) / kBlock;
    parallel_if(N * C > kMinParallelWork, [&] {
#pragma omp for schedule(static)
      for (int64_t b = 0; b < n_blocks; ++b) {
        const int64_t c0 = b * kBlock, len = std::min(C, c0 + kBlock) - c0;
        float acc[kBlock] = {};
        for (int64_t n = 0; n < N; ++n) {
          const float* x = inp + n * C + c0;
          const float* dy = d_out + n * C + c0;
          const float r = rstd[n];
          for (int64_t c = 0; c < len; ++c) acc[c] += dy[c] * x[c] * r;
        }
        for (int64_t c = 0; c < len; ++c) d_weight[c0 + c] += acc[c];
      }
    });
  }
}

}  // namespace tensorpar

// Softmax forward/backward, parallel over rows; exp is the vectorised one of fast_math.h.
#include "kernels/cpu/softmax.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/fast_math.h"

namespace tensorpar {
namespace {

// Below this many elements of work a loop runs on the calling thread: waking a team costs
// more than it saves (decode steps, small test sizes).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

}  // namespace

void softmax_forward(float* out, const float* inp, int64_t N, int64_t C) {
  TP_CHECK(N >= 0 && C > 0, "[softmax_forward] sizes: got N=", N, " C=", C,
           ", expected N >= 0 and C > 0");
#pragma omp parallel for schedule(static) if (N * C > kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float* o = out + n * C;
    const float m = row_max(x, C);
    const double sum = exp_store_sum(o, x, m, C);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t c = 0; c < C; ++c) o[c] *= inv;
  }
}

void softmax_backward(float* d_inp, const float* d_out, const float* out, int64_t N, int64_t C) {
  TP_CHECK(N >= 0 && C > 0, "[softmax_backward] sizes: got N=", N, " C=", C,
           ", expected N >= 0 and C > 0");
#pragma omp parallel for schedule(static) if (N * C > kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    const float* dy = d_out + n * C;
    const float* y = out + n * C;
    float* dx = d_inp + n * C;
    float dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < C; ++c) dot += dy[c] * y[c];
    for (int64_t c = 0; c < C; ++c) dx[c] += y[c] * (dy[c] - dot);
  }
}

}  // namespace tensorpar

// Row primitives on the vectorisable exp, compiled for AVX-512, AVX2 and the baseline and
// dispatched at run time.
#include "kernels/cpu/fast_math.h"

#include <algorithm>

namespace tensorpar {
namespace {
constexpr int64_t kBlock = 1024;  // float partial sums over at most this many terms
}  // namespace

TP_VECTOR_CLONES float row_max(const float* x, int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (int64_t i = 0; i < n; ++i) m = x[i] > m ? x[i] : m;
  return m;
}

TP_VECTOR_CLONES double exp_sum(const float* x, float shift, int64_t n) {
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b; i < e; ++i) s += fast_exp(x[i] - shift);
    total += s;
  }
  return total;
}

TP_VECTOR_CLONES double exp_store_sum(float* y, const float* x, float shift, int64_t n) {
  double total = 0;
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t e = std::min(n, b + kBlock);
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t i = b; i < e; ++i) {
      const float v = fast_exp(x[i] - shift);
      y[i] = v;
      s += v;
    }
    total += s;
  }
  return total;
}

TP_VECTOR_CLONES void add_scaled_exp(float* y, const float* x, float shift, float scale,
                                     float offset, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += fast_exp(x[i] - shift) * scale + offset;
}

}  // namespace tensorpar

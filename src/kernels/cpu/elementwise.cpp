#include "kernels/cpu/elementwise.h"

#include "core/error.h"
#include "kernels/cpu/fast_math.h"

namespace tensorpar {

namespace {

// Below this many elements a pass runs on the calling thread: waking a team costs more than it
// saves (decode steps' single rows).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

}  // namespace

TP_VECTOR_CLONES void add_arrays(float* out, const float* a, const float* b, int64_t n) {
  TP_CHECK(n >= 0, "[add_arrays] size: got n=", n, ", expected >= 0");
#pragma omp parallel for simd schedule(static) if (n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

TP_VECTOR_CLONES void scale_array(float* x, float s, int64_t n) {
  TP_CHECK(n >= 0, "[scale_array] size: got n=", n, ", expected >= 0");
#pragma omp parallel for simd schedule(static) if (n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

}  // namespace tensorpar

// Counter-based dropout (see dropout.h).
#include "parallel/dropout.h"

#include "core/error.h"

namespace tensorpar {
namespace {

constexpr int64_t kMinParallelWork = int64_t(1) << 15;

void check(const Tensor& a, const Tensor& b, float p, const char* where) {
  TP_CHECK(p >= 0.0f && p < 1.0f, "[", where, "] p: got ", p, ", expected in [0, 1)");
  TP_CHECK(a.dtype() == DType::kF32 && b.dtype() == DType::kF32 && a.is_contiguous() &&
               b.is_contiguous() && a.shape() == b.shape(),
           "[", where, "] got ", a.describe(), " and ", b.describe(),
           ", expected contiguous f32 of the same shape");
}

}  // namespace

void dropout_forward(Tensor& out, const Tensor& in, float p, const RngStream& stream,
                     uint64_t first_index) {
  check(out, in, p, "dropout_forward");
  const int64_t n = in.numel();
  if (n == 0) return;
  float* o = out.data<float>();
  const float* x = in.data<float>();
  if (p == 0.0f) {
    if (o != x) out.copy_from(in);
    return;
  }
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i)
    o[i] = stream.uniform(first_index + uint64_t(i)) >= p ? x[i] * scale : 0.0f;
}

void dropout_backward(Tensor& d_in, const Tensor& d_out, float p, const RngStream& stream,
                      uint64_t first_index) {
  check(d_in, d_out, p, "dropout_backward");
  const int64_t n = d_out.numel();
  if (n == 0) return;
  float* dx = d_in.data<float>();
  const float* dy = d_out.data<float>();
  const float scale = 1.0f / (1.0f - p);
#pragma omp parallel for schedule(static) if (n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i)
    if (p == 0.0f || stream.uniform(first_index + uint64_t(i)) >= p) dx[i] += dy[i] * scale;
}

}  // namespace tensorpar

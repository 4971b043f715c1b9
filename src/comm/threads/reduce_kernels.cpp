// The portable variant of the reductions, the run-time choice between it and AVX-512, and the
// naive one-element-at-a-time reference.
#include "comm/threads/reduce_kernels.h"

#include <cstring>
#include <type_traits>

#include "core/error.h"
#include "core/half.h"

namespace tensorpar::threads {
namespace {

struct CvtF16 {
  static void to_f32(float* dst, const uint16_t* src, int64_t m) {
    for (int64_t i = 0; i < m; ++i) dst[i] = f16_to_f32(f16{src[i]});
  }
  static void from_f32(uint16_t* dst, const float* src, int64_t m) {
    for (int64_t i = 0; i < m; ++i) dst[i] = f32_to_f16(src[i]).bits;
  }
};

struct Store {
  static void copy(void* dst, const void* src, size_t bytes, bool) { std::memcpy(dst, src, bytes); }
  static void fence() {}
};

}  // namespace
}  // namespace tensorpar::threads

#include "comm/threads/reduce_kernels_impl.h"

namespace tensorpar::threads {

namespace detail {
void reduce_range_portable(DType dtype, ReduceOp op, const void* const* srcs, int n_src,
                           void* const* dsts, int n_dst, int64_t begin, int64_t end, bool stream) {
  reduce_dispatch(dtype, op, srcs, n_src, dsts, n_dst, begin, end, stream);
}
}  // namespace detail

static bool cpu_has_avx512() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  return has;
#else
  return false;
#endif
}

static void check_reducible(DType dtype) {
  TP_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16 ||
               dtype == DType::kI32 || dtype == DType::kI64,
           "[reduce] dtype ", dtype_name(dtype), " cannot be reduced, expected f32|bf16|f16|i32|i64");
}

void reduce_range(DType dtype, ReduceOp op, const void* const* srcs, int n_src, void* const* dsts,
                  int n_dst, int64_t begin, int64_t end, bool stream) {
  check_reducible(dtype);
  if (end <= begin) return;
  if (cpu_has_avx512()) {
    detail::reduce_range_avx512(dtype, op, srcs, n_src, dsts, n_dst, begin, end, stream);
  } else {
    detail::reduce_range_portable(dtype, op, srcs, n_src, dsts, n_dst, begin, end, stream);
  }
}

template <class T>
static T naive_apply(ReduceOp op, T a, T b) {
  switch (op) {
    case ReduceOp::kSum:
      if constexpr (std::is_integral_v<T>) {
        using U = std::make_unsigned_t<T>;
        return T(U(a) + U(b));
      } else {
        return a + b;
      }
    case ReduceOp::kMax: return b > a ? b : a;
    case ReduceOp::kMin: return b < a ? b : a;
  }
  return a;
}

template <class T, class A, class Load, class Store>
static void naive_typed(ReduceOp op, const void* const* srcs, int n_src, void* const* dsts,
                        int n_dst, int64_t begin, int64_t end, Load load, Store store) {
  for (int64_t i = begin; i < end; ++i) {
    A v = load(static_cast<const T*>(srcs[0])[i]);
    for (int k = 1; k < n_src; ++k) v = naive_apply<A>(op, v, load(static_cast<const T*>(srcs[k])[i]));
    const T out = store(v);
    for (int d = 0; d < n_dst; ++d) static_cast<T*>(dsts[d])[i] = out;
  }
}

void reduce_range_naive(DType dtype, ReduceOp op, const void* const* srcs, int n_src,
                        void* const* dsts, int n_dst, int64_t begin, int64_t end) {
  check_reducible(dtype);
  auto same = [](auto x) { return x; };
  switch (dtype) {
    case DType::kF32:
      return naive_typed<float, float>(op, srcs, n_src, dsts, n_dst, begin, end, same, same);
    case DType::kI32:
      return naive_typed<int32_t, int32_t>(op, srcs, n_src, dsts, n_dst, begin, end, same, same);
    case DType::kI64:
      return naive_typed<int64_t, int64_t>(op, srcs, n_src, dsts, n_dst, begin, end, same, same);
    case DType::kBF16:
      return naive_typed<bf16, float>(op, srcs, n_src, dsts, n_dst, begin, end, bf16_to_f32, f32_to_bf16);
    case DType::kF16:
      return naive_typed<f16, float>(op, srcs, n_src, dsts, n_dst, begin, end, f16_to_f32, f32_to_f16);
    default: break;
  }
}

}  // namespace tensorpar::threads

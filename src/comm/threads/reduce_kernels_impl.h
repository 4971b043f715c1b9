// Chunked reduction templates shared by the portable and the AVX-512 translation units. Everything
// here has internal linkage (unnamed namespace) so the two ISA variants never merge at link time;
// each includer provides the f16 <-> f32 chunk converters (CvtF16) and the output copy (Store:
// plain, or non-temporal for messages far larger than the caches) before including this.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "comm/communicator.h"

namespace tensorpar::threads {
namespace {

// Elements per chunk: the accumulator stays in L1 while sources stream through.
constexpr int64_t kChunk = 1024;

struct SumOp {
  template <class A>
  static A apply(A a, A b) {
    if constexpr (std::is_integral_v<A>) {  // integers wrap like MPI's instead of being UB
      using U = std::make_unsigned_t<A>;
      return A(U(a) + U(b));
    } else {
      return a + b;
    }
  }
};
struct MaxOp {
  template <class A>
  static A apply(A a, A b) { return b > a ? b : a; }
};
struct MinOp {
  template <class A>
  static A apply(A a, A b) { return b < a ? b : a; }
};

inline int64_t min_i64(int64_t a, int64_t b) { return a < b ? a : b; }

template <class T, class Op>
void combine(T* __restrict acc, const T* __restrict x, int64_t m) {
  for (int64_t i = 0; i < m; ++i) acc[i] = Op::apply(acc[i], x[i]);
}
template <class T, class Op>
void combine2(T* __restrict acc, const T* __restrict x, const T* __restrict y, int64_t m) {
  for (int64_t i = 0; i < m; ++i) acc[i] = Op::apply(x[i], y[i]);
}

// f32, i32, i64: accumulate in the storage type.
template <class T, class Op>
void reduce_plain(const void* const* srcs, int n_src, void* const* dsts, int n_dst, int64_t begin,
                  int64_t end, bool stream) {
  alignas(64) T acc[kChunk];
  for (int64_t off = begin; off < end; off += kChunk) {
    const int64_t m = min_i64(kChunk, end - off);
    const T* s0 = static_cast<const T*>(srcs[0]) + off;
    if (n_src >= 2) {
      combine2<T, Op>(acc, s0, static_cast<const T*>(srcs[1]) + off, m);
    } else {
      std::memcpy(acc, s0, size_t(m) * sizeof(T));
    }
    for (int k = 2; k < n_src; ++k) combine<T, Op>(acc, static_cast<const T*>(srcs[k]) + off, m);
    for (int d = 0; d < n_dst; ++d) Store::copy(static_cast<T*>(dsts[d]) + off, acc, size_t(m) * sizeof(T), stream);
  }
}

// bf16 <-> f32 on raw bits, round to nearest even, NaN stays NaN (same rule as core/half.h).
struct CvtBF16 {
  static void to_f32(float* __restrict dst, const uint16_t* __restrict src, int64_t m) {
    for (int64_t i = 0; i < m; ++i) {
      const uint32_t u = uint32_t(src[i]) << 16;
      std::memcpy(&dst[i], &u, 4);
    }
  }
  static void from_f32(uint16_t* __restrict dst, const float* __restrict src, int64_t m) {
    for (int64_t i = 0; i < m; ++i) {
      uint32_t u;
      std::memcpy(&u, &src[i], 4);
      const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
      const uint32_t nan = (u >> 16) | 0x40u;
      dst[i] = uint16_t((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
    }
  }
};

// bf16/f16: accumulate in f32, round once into a 16-bit chunk, then copy it to every output.
template <class Cvt, class Op>
void reduce_half(const void* const* srcs, int n_src, void* const* dsts, int n_dst, int64_t begin,
                 int64_t end, bool stream) {
  alignas(64) float acc[kChunk];
  alignas(64) float x[kChunk];
  alignas(64) uint16_t out[kChunk];
  for (int64_t off = begin; off < end; off += kChunk) {
    const int64_t m = min_i64(kChunk, end - off);
    Cvt::to_f32(acc, static_cast<const uint16_t*>(srcs[0]) + off, m);
    for (int k = 1; k < n_src; ++k) {
      Cvt::to_f32(x, static_cast<const uint16_t*>(srcs[k]) + off, m);
      combine<float, Op>(acc, x, m);
    }
    Cvt::from_f32(out, acc, m);
    for (int d = 0; d < n_dst; ++d) Store::copy(static_cast<uint16_t*>(dsts[d]) + off, out, size_t(m) * 2, stream);
  }
}

template <class Op>
void reduce_typed(DType dtype, const void* const* srcs, int n_src, void* const* dsts, int n_dst,
                  int64_t begin, int64_t end, bool stream) {
  switch (dtype) {
    case DType::kF32: return reduce_plain<float, Op>(srcs, n_src, dsts, n_dst, begin, end, stream);
    case DType::kI32: return reduce_plain<int32_t, Op>(srcs, n_src, dsts, n_dst, begin, end, stream);
    case DType::kI64: return reduce_plain<int64_t, Op>(srcs, n_src, dsts, n_dst, begin, end, stream);
    case DType::kBF16: return reduce_half<CvtBF16, Op>(srcs, n_src, dsts, n_dst, begin, end, stream);
    case DType::kF16: return reduce_half<CvtF16, Op>(srcs, n_src, dsts, n_dst, begin, end, stream);
    default: break;
  }
}

void reduce_dispatch(DType dtype, ReduceOp op, const void* const* srcs, int n_src,
                     void* const* dsts, int n_dst, int64_t begin, int64_t end, bool stream) {
  switch (op) {
    case ReduceOp::kSum: reduce_typed<SumOp>(dtype, srcs, n_src, dsts, n_dst, begin, end, stream); break;
    case ReduceOp::kMax: reduce_typed<MaxOp>(dtype, srcs, n_src, dsts, n_dst, begin, end, stream); break;
    case ReduceOp::kMin: reduce_typed<MinOp>(dtype, srcs, n_src, dsts, n_dst, begin, end, stream); break;
  }
  if (stream) Store::fence();  // non-temporal stores are weakly ordered: publish them first
}

}  // namespace
}  // namespace tensorpar::threads

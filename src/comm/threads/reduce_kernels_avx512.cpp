// The AVX-512 variant of the reductions (compiled for AVX-512 here, chosen at run time by
// reduce_range): the chunk loops auto-vectorise; f16 converts with vcvtph2ps / vcvtps2ph.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "comm/threads/reduce_kernels.h"

// Everything below (and only that: headers are included above) is compiled for AVX-512, so no
// inline function of a shared header can be emitted here with instructions other CPUs lack.
// clang (the fuzz build) has no `#pragma GCC target`: it gets the same target as an attribute
// on every function below.
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
// GCC 12 flags the deliberately undefined lanes inside its own AVX-512 intrinsics.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#endif

namespace tensorpar::threads {
namespace {

struct CvtF16 {
  static void to_f32(float* __restrict dst, const uint16_t* __restrict src, int64_t m) {
    int64_t i = 0;
    for (; i + 16 <= m; i += 16)
      _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i))));
    if (i < m) {
      const __mmask16 k = __mmask16((1u << (m - i)) - 1u);
      _mm512_mask_storeu_ps(dst + i, k, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(k, src + i)));
    }
  }
  static void from_f32(uint16_t* __restrict dst, const float* __restrict src, int64_t m) {
    constexpr int kRne = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    int64_t i = 0;
    for (; i + 16 <= m; i += 16)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), kRne));
    if (i < m) {
      const __mmask16 k = __mmask16((1u << (m - i)) - 1u);
      _mm256_mask_storeu_epi16(dst + i, k, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), kRne));
    }
  }
};

struct Store {
  // Streams whole aligned lines past the caches (no read-for-ownership of the destination).
  static void copy(void* dst, const void* src, size_t bytes, bool stream) {
    if (!stream) {
      std::memcpy(dst, src, bytes);
      return;
    }
    char* d = static_cast<char*>(dst);
    const char* s = static_cast<const char*>(src);
    const size_t head = std::min(bytes, size_t((64 - (reinterpret_cast<uintptr_t>(d) & 63)) & 63));
    std::memcpy(d, s, head);
    size_t i = head;
    for (; i + 64 <= bytes; i += 64)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(d + i), _mm512_loadu_si512(s + i));
    std::memcpy(d + i, s + i, bytes - i);
  }
  static void fence() { _mm_sfence(); }
};

}  // namespace
}  // namespace tensorpar::threads

#include "comm/threads/reduce_kernels_impl.h"

namespace tensorpar::threads::detail {

void reduce_range_avx512(DType dtype, ReduceOp op, const void* const* srcs, int n_src,
                         void* const* dsts, int n_dst, int64_t begin, int64_t end, bool stream) {
  reduce_dispatch(dtype, op, srcs, n_src, dsts, n_dst, begin, end, stream);
}

}  // namespace tensorpar::threads::detail

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC diagnostic pop
#pragma GCC pop_options
#endif

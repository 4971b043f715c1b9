// The AVX-512 unpacking of one GGUF block (q8_0, q4_0, q4_1) into its 32 quant values as two
// vectors of floats, its scale and offset: shared by the fused quantized matmul and the
// row-invariant matmul, so both read blocks the same way. Functions carry a target attribute;
// callers check the CPU at run time.
#pragma once

#include <immintrin.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/quant.h"

#define TP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace tensorpar::quant_detail {

// Raw quant values of block b as floats (lo = elements 0..15, hi = 16..31), its scale d and
// offset m (q4_1 only; the others leave m = 0).
template <DType T>
TP_AVX512 inline void unpack512(const void* w, int64_t b, __m512& lo, __m512& hi, float& d,
                                float& m) {
  const __m128i mask = _mm_set1_epi8(0x0f);
  if constexpr (T == DType::kQ8_0) {
    const auto* blk = static_cast<const BlockQ8_0*>(w) + b;
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs))));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs + 16))));
    d = _cvtsh_ss(blk->d.bits);
  } else if constexpr (T == DType::kQ4_0) {
    const auto* blk = static_cast<const BlockQ4_0*>(w) + b;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    const __m128i eight = _mm_set1_epi8(8);
    const __m128i l = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
    const __m128i h = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(l));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(h));
    d = _cvtsh_ss(blk->d.bits);
  } else {
    const auto* blk = static_cast<const BlockQ4_1*>(w) + b;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, mask)));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), mask)));
    d = _cvtsh_ss(blk->d.bits);
    m = _cvtsh_ss(blk->m.bits);
  }
}

}  // namespace tensorpar::quant_detail

// The AVX-512 unpacking of one legacy GGUF block (32 weights: q8_0, q4_0, q4_1, q5_0, q5_1,
// iq4_nl) into its 32 quant values as two vectors of floats, its scale and offset: shared by the
// fused quantized matmul and the row-invariant matmul, so both read blocks the same way (the
// K-quants dequantize whole super-blocks instead: kquant_dequant_avx512.cpp). Functions carry a
// target attribute; callers check the CPU at run time.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/quant.h"

#define TP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace tensorpar::quant_detail {

// Nibbles of 16 bytes as elements 0..15 (low) and 16..31 (high), with the q5 fifth bits of the
// little-endian qh added as 16.
TP_AVX512 inline void nibbles_q5(const uint8_t* qs, const uint8_t* qh, __m128i& l, __m128i& h) {
  const __m128i mask = _mm_set1_epi8(0x0f), sixteen = _mm_set1_epi8(16);
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  l = _mm_and_si128(q, mask);
  h = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
  l = _mm_mask_add_epi8(l, __mmask16(bits & 0xffff), l, sixteen);
  h = _mm_mask_add_epi8(h, __mmask16(bits >> 16), h, sixteen);
}

// Raw quant values of block b as floats (lo = elements 0..15, hi = 16..31), its scale d and
// offset m (q4_1 and q5_1 only; the others leave m = 0).
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
  } else if constexpr (T == DType::kQ4_1) {
    const auto* blk = static_cast<const BlockQ4_1*>(w) + b;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, mask)));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), mask)));
    d = _cvtsh_ss(blk->d.bits);
    m = _cvtsh_ss(blk->m.bits);
  } else if constexpr (T == DType::kQ5_0) {
    const auto* blk = static_cast<const BlockQ5_0*>(w) + b;
    __m128i l, h;
    nibbles_q5(blk->qs, blk->qh, l, h);
    lo = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(l), _mm512_set1_epi32(16)));
    hi = _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(h), _mm512_set1_epi32(16)));
    d = _cvtsh_ss(blk->d.bits);
  } else if constexpr (T == DType::kQ5_1) {
    const auto* blk = static_cast<const BlockQ5_1*>(w) + b;
    __m128i l, h;
    nibbles_q5(blk->qs, blk->qh, l, h);
    lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(l));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(h));
    d = _cvtsh_ss(blk->d.bits);
    m = _cvtsh_ss(blk->m.bits);
  } else {
    static_assert(T == DType::kIQ4_NL);
    const auto* blk = static_cast<const BlockIQ4_NL*>(w) + b;
    const __m128i table = _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(table, _mm_and_si128(q, mask))));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(q, 4), mask))));
    d = _cvtsh_ss(blk->d.bits);
  }
}

}  // namespace tensorpar::quant_detail

// Integer dot products on AVX2 shared by the int8 kernels (int8_matmul_avx2.cpp,
// int8_matmul_packed_avx2.cpp): VPMADDUBSW (unsigned x signed bytes, adjacent pairs summed to
// int16) then VPMADDWD by ones give the 8 int32 lanes of 4 products that VPDPBUSD gives, exactly
// while each pair fits int16.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/cpu/target_isa.h"

namespace tensorpar::int8_detail {

// 4 products per int32 lane: unsigned codes (< 64) x signed activations.
TP_AVX2 inline __m256i dot_u8s8(__m256i codes, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(codes, x), _mm256_set1_epi16(1));
}

// 4 products per int32 lane: signed codes x signed activations (|q| times x carrying q's sign).
TP_AVX2 inline __m256i dot_s8s8(__m256i q, __m256i x) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_sign_epi8(q, q), _mm256_sign_epi8(x, q)), _mm256_set1_epi16(1));
}

// 0xff in byte j where bit j of `bits` is set.
TP_AVX2 inline __m256i bytes_from_bits(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(int(bits)), _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2,
                                                     2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i select = _mm256_set1_epi64x(0x8040201008040201LL);
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, select), select);
}

// The same for the 32 little-endian bits at p.
TP_AVX2 inline __m256i bytes_from_bits(const uint8_t* p) {
  uint32_t bits;
  std::memcpy(&bits, p, 4);
  return bytes_from_bits(bits);
}

}  // namespace tensorpar::int8_detail

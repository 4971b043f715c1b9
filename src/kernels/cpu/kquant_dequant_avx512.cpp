// AVX-512 dequantization of ggml's K-quant super-blocks (Q2_K..Q6_K, 256 weights) into f32:
// the bits of each group of 32 weights become 32 signed bytes, then two vectors of 16 floats
// scaled per 16-weight (or 32-weight) sub-block. The arithmetic is the scalar reference's
// (quant_k.cpp): (d * sc) * q - (dmin * m), each product rounded, so results are bitwise equal.
// Target attributes; callers check the CPU at run time.
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "kernels/cpu/quant_unpack_avx512.h"

namespace tensorpar::quant_detail {

namespace {

// out[0..32) = q[i] * s - m with (s, m) = (s0, m0) for the first 16 weights, (s1, m1) after.
TP_AVX512 inline void store32(float* out, __m256i q, float s0, float m0, float s1, float m1) {
  const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_castsi256_si128(q)));
  const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1)));
  _mm512_storeu_ps(out, _mm512_sub_ps(_mm512_mul_ps(lo, _mm512_set1_ps(s0)), _mm512_set1_ps(m0)));
  _mm512_storeu_ps(out + 16,
                   _mm512_sub_ps(_mm512_mul_ps(hi, _mm512_set1_ps(s1)), _mm512_set1_ps(m1)));
}

TP_AVX512 inline __m256i bits(__m256i v, int shift, int mask) {
  return _mm256_and_si256(_mm256_srl_epi16(v, _mm_cvtsi32_si128(shift)),
                          _mm256_set1_epi8(char(mask)));
}

TP_AVX512 inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

TP_AVX512 void q2_k(float* y, const BlockQ2_K& b) {
  const float d = _cvtsh_ss(b.d.bits), dmin = _cvtsh_ss(b.dmin.bits);
  for (int n = 0; n < 2; ++n) {
    const __m256i q = load32(b.qs + 32 * n);
    for (int j = 0; j < 4; ++j) {
      const uint8_t s0 = b.scales[8 * n + 2 * j], s1 = b.scales[8 * n + 2 * j + 1];
      store32(y + 128 * n + 32 * j, bits(q, 2 * j, 3), d * float(s0 & 0xF), dmin * float(s0 >> 4),
              d * float(s1 & 0xF), dmin * float(s1 >> 4));
    }
  }
}

TP_AVX512 void q3_k(float* y, const BlockQ3_K& b) {
  const float d = _cvtsh_ss(b.d.bits);
  int8_t sc[16];
  q3_k_scales(b.scales, sc);
  const __m256i hm = load32(b.hmask), four = _mm256_set1_epi8(4);
  for (int n = 0; n < 2; ++n) {
    const __m256i q = load32(b.qs + 32 * n);
    for (int j = 0; j < 4; ++j) {
      const int g = 4 * n + j;
      // low 2 bits + 4 * high bit - 4: a clear high bit subtracts 4.
      const __m256i v = _mm256_sub_epi8(
          _mm256_or_si256(bits(q, 2 * j, 3), _mm256_slli_epi16(bits(hm, g, 1), 2)), four);
      store32(y + 32 * g, v, d * float(sc[2 * g]), 0.0f, d * float(sc[2 * g + 1]), 0.0f);
    }
  }
}

// Q4_K and Q5_K (qh null for Q4_K).
TP_AVX512 void k4_k5(float* y, f16 d16, f16 dmin16, const uint8_t* scales, const uint8_t* qh,
                     const uint8_t* qs) {
  const float d = _cvtsh_ss(d16.bits), dmin = _cvtsh_ss(dmin16.bits);
  const __m256i h = qh ? load32(qh) : _mm256_setzero_si256();
  for (int c = 0; c < 4; ++c) {
    const __m256i q = load32(qs + 32 * c);
    for (int half = 0; half < 2; ++half) {
      const int j = 2 * c + half;
      __m256i v = bits(q, 4 * half, 0xF);
      if (qh) v = _mm256_or_si256(v, _mm256_slli_epi16(bits(h, j, 1), 4));
      int sc = 0, m = 0;
      kquant_scale_min(scales, j, sc, m);
      const float ds = d * float(sc), dm = dmin * float(m);
      store32(y + 32 * j, v, ds, dm, ds, dm);
    }
  }
}

TP_AVX512 void q6_k(float* y, const BlockQ6_K& b) {
  const float d = _cvtsh_ss(b.d.bits);
  const __m256i off = _mm256_set1_epi8(32);
  for (int h = 0; h < 2; ++h) {
    const __m256i l0 = load32(b.ql + 64 * h), l1 = load32(b.ql + 64 * h + 32),
                  hb = load32(b.qh + 32 * h);
    // Group g of the half: nibble g/2 of ql[64h + 32*(g%2) + l], bit pair g of qh[32h + l].
    const __m256i lo[4] = {l0, l1, l0, l1};
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_sub_epi8(
          _mm256_or_si256(bits(lo[g], 4 * (g / 2), 0xF), _mm256_slli_epi16(bits(hb, 2 * g, 3), 4)),
          off);
      const int s = 8 * h + 2 * g;
      store32(y + 128 * h + 32 * g, v, d * float(b.scales[s]), 0.0f, d * float(b.scales[s + 1]),
              0.0f);
    }
  }
}

}  // namespace

void dequant_kquant_avx512(float* out, const void* w, DType t, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float* y = out + i * kKQuantBlock;
    switch (t) {
      case DType::kQ2_K:
        q2_k(y, static_cast<const BlockQ2_K*>(w)[i]);
        break;
      case DType::kQ3_K:
        q3_k(y, static_cast<const BlockQ3_K*>(w)[i]);
        break;
      case DType::kQ4_K: {
        const auto& b = static_cast<const BlockQ4_K*>(w)[i];
        k4_k5(y, b.d, b.dmin, b.scales, nullptr, b.qs);
        break;
      }
      case DType::kQ5_K: {
        const auto& b = static_cast<const BlockQ5_K*>(w)[i];
        k4_k5(y, b.d, b.dmin, b.scales, b.qh, b.qs);
        break;
      }
      case DType::kQ6_K:
        q6_k(y, static_cast<const BlockQ6_K*>(w)[i]);
        break;
      default:
        TP_ASSERT(false, "not a K-quant");
    }
  }
}

}  // namespace tensorpar::quant_detail

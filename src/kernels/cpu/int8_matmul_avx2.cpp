// The int8-activation kernels on AVX2 with FMA and F16C (see int8_matmul.h and
// int8_matmul_driver.h), for CPUs without AVX512-VNNI. A 32-element block is one 256-bit vector;
// VPMADDUBSW (unsigned x signed bytes, adjacent pairs summed to int16) then VPMADDWD by ones give
// the 8 int32 lanes of 4 products that VPDPBUSD gives, exactly while each pair fits int16: the
// codes of Q4/Q5 types and K-quants are below 64 (|pair| <= 2 x 63 x 127). Q8_0 and IQ4_NL codes
// span -128..127, so those are multiplied signed: |q| times x carrying q's sign (|pair| <=
// 2 x 128 x 127), which is sum q * x, the corrected sum itself. Per block the lanes go to f32,
// times the input's block scale, fused into the accumulator with the weight's (legacy types), or
// times the lanes' sub-block scales and once per super-block by d (K-quants).
// Up to 2 weight rows x 4 input rows per register block (16 vector registers).
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>
#include <cstring>

#include "core/half.h"
#include "core/quant.h"
#include "kernels/cpu/avx2_int8.h"
#include "kernels/cpu/int8_matmul_driver.h"
#include "kernels/cpu/unroll.h"

namespace tensorpar::int8_detail {

namespace {

namespace avx2 {

// Q8_0 and IQ4_NL: codes kept signed (q itself), multiplied by the signed rule.
constexpr bool signed_codes(DType t) { return legacy_offset(t) == 128; }

// sum (code - offset) * x per lane: corr holds -offset x the lane's activations.
template <DType T>
TP_AVX2 inline __m256i legacy_lanes(__m256i codes, __m256i x, __m256i corr) {
  if constexpr (signed_codes(T)) return dot_s8s8(codes, x);
  else return _mm256_add_epi32(corr, dot_u8s8(codes, x));
}

// The 32 nibbles of 16 bytes in element order: low halves are elements 0..15, high 16..31.
TP_AVX2 inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
}

// q5's fifth bits (bit j of the little-endian qh: element j) added as 16.
TP_AVX2 inline __m256i fifth_bits(__m256i c, const uint8_t* qh) {
  return _mm256_add_epi8(c, _mm256_and_si256(bytes_from_bits(qh), _mm256_set1_epi8(16)));
}

template <DType T>
TP_AVX2 inline __m256i legacy_codes(const char* blk, float& d, float& m) {
  m = 0.0f;
  if constexpr (T == DType::kQ4_0) {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(blk);
    d = _cvtsh_ss(b->d.bits);
    return nibbles32(b->qs);
  } else if constexpr (T == DType::kQ4_1) {
    const auto* b = reinterpret_cast<const BlockQ4_1*>(blk);
    d = _cvtsh_ss(b->d.bits);
    m = _cvtsh_ss(b->m.bits);
    return nibbles32(b->qs);
  } else if constexpr (T == DType::kQ5_0) {
    const auto* b = reinterpret_cast<const BlockQ5_0*>(blk);
    d = _cvtsh_ss(b->d.bits);
    return fifth_bits(nibbles32(b->qs), b->qh);
  } else if constexpr (T == DType::kQ5_1) {
    const auto* b = reinterpret_cast<const BlockQ5_1*>(blk);
    d = _cvtsh_ss(b->d.bits);
    m = _cvtsh_ss(b->m.bits);
    return fifth_bits(nibbles32(b->qs), b->qh);
  } else if constexpr (T == DType::kQ8_0) {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(blk);
    d = _cvtsh_ss(b->d.bits);
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs));
  } else {
    static_assert(T == DType::kIQ4_NL);
    const auto* b = reinterpret_cast<const BlockIQ4_NL*>(blk);
    d = _cvtsh_ss(b->d.bits);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    return _mm256_shuffle_epi8(table, nibbles32(b->qs));
  }
}

template <DType T>
TP_AVX2 void legacy_unpack_row(const char* wrow, int64_t nb, char* dst, float* m) {
  constexpr int64_t bb = dtype_block_bytes(T);
  for (int64_t b = 0; b < nb; ++b) {
    float d, mb;
    const __m256i codes = legacy_codes<T>(wrow + b * bb, d, mb);
    char* pair = dst + b / 2 * 128;
    _mm256_store_si256(reinterpret_cast<__m256i*>(pair + (b % 2) * 32), codes);
    _mm256_store_ps(reinterpret_cast<float*>(pair + 64 + (b % 2) * 32), _mm256_set1_ps(d));
    m[b] = mb;
  }
}

TP_AVX2 inline float reduce256(__m256 v) {
  const __m128 h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 q = _mm_add_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_add_ss(q, _mm_movehdup_ps(q)));
}

// res[i * kRows + r] = input row r . weight row i (i < W, r < R). Per block and pair: the 8 int32
// lanes to f32, times the input's block scale, fused into the accumulator with the weight's. The
// q4_1 / q5_1 offset term sum_b m_b * s_b is a separate dot over blocks at the end.
template <DType T, int W, int R, bool kUnpacked>
TP_AVX2 void legacy_dot(const char* const* w, int64_t nb, const char* act, const ActLayout& l, float* const* m,
                        float* res) {
  constexpr int64_t bb = dtype_block_bytes(T);
  constexpr bool kOffsetTerm = T == DType::kQ4_1 || T == DType::kQ5_1;
  __m256 acc[W][R];
  TP_UNROLL for (int i = 0; i < W; ++i)
    TP_UNROLL for (int r = 0; r < R; ++r) acc[i][r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i codes[W];
    __m256 dw[W];
    TP_UNROLL for (int i = 0; i < W; ++i) {
      if constexpr (kUnpacked) {
        const char* pair = w[i] + b / 2 * 128;
        codes[i] = _mm256_load_si256(reinterpret_cast<const __m256i*>(pair + (b % 2) * 32));
        dw[i] = _mm256_load_ps(reinterpret_cast<const float*>(pair + 64 + (b % 2) * 32));
      } else {
        float d, mb;
        _mm_prefetch(w[i] + b * bb + kPrefetchBytes, _MM_HINT_T0);
        codes[i] = legacy_codes<T>(w[i] + b * bb, d, mb);
        dw[i] = _mm256_set1_ps(d);
        if constexpr (kOffsetTerm) m[i][b] = mb;
      }
    }
    TP_UNROLL for (int r = 0; r < R; ++r) {
      const char* a = act + r * l.row_bytes;
      const __m256i x = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + b * kQuantBlock));
      __m256i corr = _mm256_setzero_si256();
      if constexpr (!signed_codes(T)) corr = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + l.off_b + b * 32));
      const __m256 dx = _mm256_load_ps(reinterpret_cast<const float*>(a + l.off_a) + b * 8);
      TP_UNROLL for (int i = 0; i < W; ++i) {
        const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(legacy_lanes<T>(codes[i], x, corr)), dx);
        acc[i][r] = _mm256_fmadd_ps(t, dw[i], acc[i][r]);
      }
    }
  }
  TP_UNROLL for (int i = 0; i < W; ++i)
    TP_UNROLL for (int r = 0; r < R; ++r) {
      float v = reduce256(acc[i][r]);
      if constexpr (kOffsetTerm) {
        const float* sx = reinterpret_cast<const float*>(act + r * l.row_bytes + l.off_c);
        __m256 macc = _mm256_setzero_ps();
        int64_t j = 0;
        for (; j + 8 <= nb; j += 8) macc = _mm256_fmadd_ps(_mm256_loadu_ps(m[i] + j), _mm256_loadu_ps(sx + j), macc);
        float tail = 0.0f;
        for (; j < nb; ++j) tail = std::fma(m[i][j], sx[j], tail);
        v += reduce256(macc) + tail;
      }
      res[i * kRows + r] = v;
    }
}

// ---- K-quant super-blocks: 8 vectors of 32 codes, each with its 8 lanes' f32 scales ----

struct KBlock {
  __m256i codes[8];   // element order: vector j holds elements 32j..32j+31
  __m256 scales[8];   // the sub-block scale of each lane's 4 weights (small integers, exact in f32)
  __m256i mins;       // Q4_K / Q5_K: the 8 sub-block mins
  float d, dmin;
};

// Q6_K's two high bits of 32 elements (bits shift..shift+1 of each qh byte), in place (<< 4).
TP_AVX2 inline __m256i q6_high(__m256i qh, int shift) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(shift)), _mm256_set1_epi8(3)), 4);
}

template <DType T>
TP_AVX2 inline void kquant_unpack(const char* blk, KBlock& k) {
  const __m256i mask = _mm256_set1_epi8(0x0f);
  if constexpr (T == DType::kQ4_K || T == DType::kQ5_K) {
    const uint8_t *scales, *qs, *qh = nullptr;
    if constexpr (T == DType::kQ4_K) {
      const auto* b = reinterpret_cast<const BlockQ4_K*>(blk);
      k.d = _cvtsh_ss(b->d.bits), k.dmin = _cvtsh_ss(b->dmin.bits), scales = b->scales, qs = b->qs;
    } else {
      const auto* b = reinterpret_cast<const BlockQ5_K*>(blk);
      k.d = _cvtsh_ss(b->d.bits), k.dmin = _cvtsh_ss(b->dmin.bits), scales = b->scales, qs = b->qs, qh = b->qh;
    }
    uint64_t sc8, mn8;
    kquant_scales_mins(scales, sc8, mn8);
    k.mins = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(mn8)));
    const __m256 scf = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(sc8))));
    __m256i hv = _mm256_setzero_si256();
    if constexpr (T == DType::kQ5_K) hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
    for (int c = 0; c < 4; ++c) {  // 64 elements: the low nibbles of 32 bytes, then their high nibbles
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      __m256i lo = _mm256_and_si256(q, mask), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
      if constexpr (T == DType::kQ5_K) {
        const __m256i sixteen = _mm256_set1_epi8(16);
        const __m256i blo = _mm256_set1_epi8(char(1 << (2 * c))), bhi = _mm256_set1_epi8(char(2 << (2 * c)));
        lo = _mm256_add_epi8(lo, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, blo), blo), sixteen));
        hi = _mm256_add_epi8(hi, _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hv, bhi), bhi), sixteen));
      }
      k.codes[2 * c] = lo, k.codes[2 * c + 1] = hi;
      k.scales[2 * c] = _mm256_permutevar8x32_ps(scf, _mm256_set1_epi32(2 * c));
      k.scales[2 * c + 1] = _mm256_permutevar8x32_ps(scf, _mm256_set1_epi32(2 * c + 1));
    }
  } else {
    static_assert(T == DType::kQ6_K);
    const auto* b = reinterpret_cast<const BlockQ6_K*>(blk);
    k.d = _cvtsh_ss(b->d.bits);
    k.dmin = 0.0f;
    for (int h = 0; h < 2; ++h) {  // 128 elements: ql's 64 bytes (low, then high nibbles), qh's 32
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h));
      k.codes[4 * h] = _mm256_or_si256(_mm256_and_si256(ql0, mask), q6_high(qh, 0));
      k.codes[4 * h + 1] = _mm256_or_si256(_mm256_and_si256(ql1, mask), q6_high(qh, 2));
      k.codes[4 * h + 2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), mask), q6_high(qh, 4));
      k.codes[4 * h + 3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), mask), q6_high(qh, 6));
    }
    // 32 elements: sub-blocks 2j (lanes 0..3) and 2j+1 (lanes 4..7), from the 16 scales widened once.
    const __m128i s16 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales));
    const __m256 lo = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(s16));
    const __m256 hi = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(s16, 8)));
    for (int j = 0; j < 8; ++j) {
      const int s = 2 * (j % 4);
      const __m256i idx = _mm256_setr_epi32(s, s, s, s, s + 1, s + 1, s + 1, s + 1);
      k.scales[j] = _mm256_permutevar8x32_ps(j < 4 ? lo : hi, idx);
    }
  }
}

TP_AVX2 inline void kblock_store(const KBlock& k, char* dst) {
  for (int j = 0; j < 8; ++j) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(dst + j * 32), k.codes[j]);
    _mm256_store_ps(reinterpret_cast<float*>(dst + 256 + j * 32), k.scales[j]);
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 512), k.mins);
  std::memcpy(dst + 544, &k.d, 4);
  std::memcpy(dst + 548, &k.dmin, 4);
}

TP_AVX2 inline void kblock_load(const char* src, KBlock& k) {
  for (int j = 0; j < 8; ++j) {
    k.codes[j] = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + j * 32));
    k.scales[j] = _mm256_load_ps(reinterpret_cast<const float*>(src + 256 + j * 32));
  }
  k.mins = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + 512));
  std::memcpy(&k.d, src + 544, 4);
  std::memcpy(&k.dmin, src + 548, 4);
}

template <DType T>
TP_AVX2 void kquant_unpack_row(const char* wrow, int64_t nsb, char* dst) {
  constexpr int64_t bb = dtype_block_bytes(T);
  KBlock k;
  k.mins = _mm256_setzero_si256();
  for (int64_t s = 0; s < nsb; ++s) {
    kquant_unpack<T>(wrow + s * bb, k);
    kblock_store(k, dst + s * kKBlockBytes);
  }
}

// wrow: the row as stored, or (kUnpacked) as kquant_unpack_row wrote it.
template <DType T, int R, bool kUnpacked>
TP_AVX2 void kquant_dot(const char* wrow, int64_t nsb, const char* act, const ActLayout& l, float* res) {
  constexpr int64_t bb = dtype_block_bytes(T);
  __m256 acc[R], accm[R];
  TP_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), accm[r] = _mm256_setzero_ps();
  KBlock k;
  for (int64_t s = 0; s < nsb; ++s) {
    if constexpr (kUnpacked) {
      kblock_load(wrow + s * kKBlockBytes, k);
    } else {
      for (int64_t p = 0; p < bb; p += 64) _mm_prefetch(wrow + s * bb + kPrefetchBytes + p, _MM_HINT_T0);
      kquant_unpack<T>(wrow + s * bb, k);
    }
    TP_UNROLL for (int r = 0; r < R; ++r) {
      const char* a = act + r * l.row_bytes;
      const char* x = a + s * kKQuantBlock;
      // Per 32 weights: the exact int32 lane sums (Q6_K's -32 folded in by its corr lanes), to
      // f32, times the lanes' sub-block scales; the super-block's d x d_x once.
      __m256 sb = _mm256_setzero_ps();
      for (int j = 0; j < 8; ++j) {
        __m256i dot = dot_u8s8(k.codes[j], _mm256_load_si256(reinterpret_cast<const __m256i*>(x + j * 32)));
        if constexpr (T == DType::kQ6_K)
          dot = _mm256_add_epi32(dot, _mm256_load_si256(reinterpret_cast<const __m256i*>(a + l.off_b + s * kKQuantBlock + j * 32)));
        sb = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), k.scales[j], sb);
      }
      const float dx = reinterpret_cast<const float*>(a + l.off_a)[s];
      if constexpr (T != DType::kQ6_K) {
        const __m256i s32 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + l.off_c + s * 32));
        accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(k.mins, s32)), _mm256_set1_ps(k.dmin * dx), accm[r]);
      }
      acc[r] = _mm256_fmadd_ps(sb, _mm256_set1_ps(k.d * dx), acc[r]);
    }
  }
  TP_UNROLL for (int r = 0; r < R; ++r) {
    float m = 0.0f;
    if constexpr (T != DType::kQ6_K) m = reduce256(accm[r]);
    res[r] = reduce256(acc[r]) - m;
  }
}

}  // namespace avx2

struct Avx2 {
  static constexpr int kWRows = 2;
  static constexpr bool kStreamsRows = false;  // one input row: one weight row at a time
  template <DType T, int W, int R, bool kUnpacked>
  static void legacy_dot(const char* const* w, int64_t nb, const char* act, const ActLayout& l, float* const* m,
                         float* res) {
    avx2::legacy_dot<T, W, R, kUnpacked>(w, nb, act, l, m, res);
  }
  template <DType T>
  static void legacy_unpack_row(const char* wrow, int64_t nb, char* dst, float* m) {
    avx2::legacy_unpack_row<T>(wrow, nb, dst, m);
  }
  template <DType T, int R, bool kUnpacked>
  static void kquant_dot(const char* wrow, int64_t nsb, const char* act, const ActLayout& l, float* res) {
    avx2::kquant_dot<T, R, kUnpacked>(wrow, nsb, act, l, res);
  }
  template <DType T>
  static void kquant_unpack_row(const char* wrow, int64_t nsb, char* dst) {
    avx2::kquant_unpack_row<T>(wrow, nsb, dst);
  }
};

}  // namespace

void run_avx2(const Operands& o, DType t) { Driver<Avx2>::run_type(o, t); }

}  // namespace tensorpar::int8_detail

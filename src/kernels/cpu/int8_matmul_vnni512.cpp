// The int8-activation kernels on AVX-512 with VNNI (see int8_matmul.h and int8_matmul_driver.h):
// up to 4 weight rows (legacy types; one for K-quants) against up to 4 input rows, weight codes
// unpacked once into registers, one VPDPBUSD per (pair, 64 weights), the integer lanes scaled in
// f32 per block (legacy) or by the lanes' sub-block scales and then once per super-block by d
// (K-quants).
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstring>

#include "core/half.h"
#include "core/quant.h"
#include "kernels/cpu/int8_matmul_driver.h"
#include "kernels/cpu/unroll.h"

#define TP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace tensorpar::int8_detail {

namespace {

namespace vnni {

// ---- legacy blocks: 32 codes (unsigned, code = q + offset) in a 256-bit half ----

// The 32 nibbles of 16 bytes in element order: low halves are elements 0..15, high 16..31.
TP_VNNI inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i mask = _mm_set1_epi8(0x0f);
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), mask), _mm_and_si128(v, mask));
}

// q5's fifth bits (bit j of the little-endian qh: element j) added as 16.
TP_VNNI inline __m256i fifth_bits(__m256i c, const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return _mm256_mask_add_epi8(c, __mmask32(bits), c, _mm256_set1_epi8(16));
}

template <DType T>
TP_VNNI inline __m256i legacy_codes(const char* blk, float& d, float& m) {
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
    return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs)), _mm256_set1_epi8(char(0x80)));
  } else {
    static_assert(T == DType::kIQ4_NL);
    const auto* b = reinterpret_cast<const BlockIQ4_NL*>(blk);
    d = _cvtsh_ss(b->d.bits);
    const __m256i idx = nibbles32(b->qs);
    const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
    return _mm256_xor_si256(_mm256_shuffle_epi8(table, idx), _mm256_set1_epi8(char(0x80)));
  }
}

// The codes and scales of blocks b and b+1 (b+1 < nb, else zeros) of one weight row as the
// kernel multiplies them: 64 codes and the 16 lanes' f32 scales.
template <DType T>
TP_VNNI inline void legacy_pair(const char* wrow, int64_t b, int64_t nb, __m512i& codes, __m512& dw, float& m0, float& m1) {
  constexpr int64_t bb = dtype_block_bytes(T);
  float d0, d1 = 0.0f;
  m1 = 0.0f;
  const __m256i c0 = legacy_codes<T>(wrow + b * bb, d0, m0);
  __m256i c1 = _mm256_setzero_si256();
  if (b + 1 < nb) c1 = legacy_codes<T>(wrow + (b + 1) * bb, d1, m1);
  codes = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
  dw = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1), 1);
}


template <DType T>
TP_VNNI void legacy_unpack_row(const char* wrow, int64_t nb, char* dst, float* m) {
  for (int64_t b = 0; b < nb; b += 2) {
    __m512i codes;
    __m512 dw;
    float m0, m1;
    legacy_pair<T>(wrow, b, nb, codes, dw, m0, m1);
    _mm512_store_si512(dst + b / 2 * 128, codes);
    _mm512_store_ps(dst + b / 2 * 128 + 64, dw);
    m[b] = m0;
    if (b + 1 < nb) m[b + 1] = m1;
  }
}

// res[i * kRows + r] = input row r of the layout . weight row i, r < R (R <= kRows); w[i] is the
// row as stored or (kUnpacked) as legacy_unpack_row wrote it, m[i] its q4_1 / q5_1 offsets
// (kUnpacked: already there; else written here).
// Per 64 weights (two blocks) and pair: one VPDPBUSD, the int32 lanes to f32, times the input's
// block scale, fused into the accumulator with the weight's. The q4_1 / q5_1 offset term
// sum_b m_b * s_b (s_b = d_x * the block's code sum) is a separate dot over blocks at the end.
template <DType T, int W, int R, bool kUnpacked>
TP_VNNI void legacy_dot(const char* const* w, int64_t nb, const char* act, const ActLayout& l, float* const* m,
                        float* res) {
  constexpr int64_t bb = dtype_block_bytes(T);
  constexpr bool kOffsetTerm = T == DType::kQ4_1 || T == DType::kQ5_1;
  __m512 acc[W][R];
  TP_UNROLL for (int i = 0; i < W; ++i)
    TP_UNROLL for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b += 2) {
    __m512i codes[W];
    __m512 dw[W];
    TP_UNROLL for (int i = 0; i < W; ++i) {
      if constexpr (kUnpacked) {
        codes[i] = _mm512_load_si512(w[i] + b / 2 * 128);
        dw[i] = _mm512_load_ps(w[i] + b / 2 * 128 + 64);
      } else {
        float m0, m1;
        _mm_prefetch(w[i] + b * bb + kPrefetchBytes, _MM_HINT_T0);
        legacy_pair<T>(w[i], b, nb, codes[i], dw[i], m0, m1);
        if constexpr (kOffsetTerm) {
          m[i][b] = m0;
          if (b + 1 < nb) m[i][b + 1] = m1;
        }
      }
    }
    const int64_t lane = b * 8;  // first of the 16 lanes of this chunk
    TP_UNROLL for (int r = 0; r < R; ++r) {
      const char* a = act + r * l.row_bytes;
      const __m512i x = _mm512_load_si512(a + b * kQuantBlock);
      const __m512i corr = _mm512_load_si512(a + l.off_b + lane * 4);
      const __m512 dx = _mm512_load_ps(reinterpret_cast<const float*>(a + l.off_a) + lane);
      TP_UNROLL for (int i = 0; i < W; ++i) {
        const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, codes[i], x)), dx);
        acc[i][r] = _mm512_fmadd_ps(t, dw[i], acc[i][r]);
      }
    }
  }
  TP_UNROLL for (int i = 0; i < W; ++i)
    TP_UNROLL for (int r = 0; r < R; ++r) {
      float v = _mm512_reduce_add_ps(acc[i][r]);
      if constexpr (kOffsetTerm) {
        const float* sx = reinterpret_cast<const float*>(act + r * l.row_bytes + l.off_c);
        __m512 macc = _mm512_setzero_ps();
        int64_t b = 0;
        for (; b + 16 <= nb; b += 16) macc = _mm512_fmadd_ps(_mm512_loadu_ps(m[i] + b), _mm512_loadu_ps(sx + b), macc);
        const __mmask16 tail = __mmask16((1u << (nb - b)) - 1);
        macc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, m[i] + b), _mm512_maskz_loadu_ps(tail, sx + b), macc);
        v += _mm512_reduce_add_ps(macc);
      }
      res[i * kRows + r] = v;
    }
}

// ---- K-quant super-blocks: 4 chunks of 64 codes, int32 lane scales ----

struct KBlock {
  __m512i codes[4];
  __m512 scales[4];   // the sub-block scale of each lane's 4 weights (small integers, exact in f32)
  __m256i mins;       // Q4_K / Q5_K: the 8 sub-block mins
  float d, dmin;
};

TP_VNNI inline __m512i lane_scales8(__m256i s8, int c) {
  // lanes 0..7 -> sub-block 2c, lanes 8..15 -> 2c+1
  const __m512i idx = _mm512_set_epi32(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                                       2 * c + 1, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c);
  return _mm512_permutexvar_epi32(idx, _mm512_castsi256_si512(s8));
}

template <DType T>
TP_VNNI inline void kquant_unpack(const char* blk, KBlock& k) {
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
    const __m256i sc = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(sc8)));
    k.mins = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(int64_t(mn8)));
    __m256i hv = _mm256_setzero_si256();
    if constexpr (T == DType::kQ5_K) hv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
    for (int c = 0; c < 4; ++c) {
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * c));
      __m256i lo = _mm256_and_si256(q, mask), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), mask);
      if constexpr (T == DType::kQ5_K) {
        const __m256i sixteen = _mm256_set1_epi8(16);
        lo = _mm256_mask_add_epi8(lo, _mm256_test_epi8_mask(hv, _mm256_set1_epi8(char(1 << (2 * c)))), lo, sixteen);
        hi = _mm256_mask_add_epi8(hi, _mm256_test_epi8_mask(hv, _mm256_set1_epi8(char(2 << (2 * c)))), hi, sixteen);
      }
      k.codes[c] = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
      k.scales[c] = _mm512_cvtepi32_ps(lane_scales8(sc, c));
    }
  } else {
    static_assert(T == DType::kQ6_K);
    const auto* b = reinterpret_cast<const BlockQ6_K*>(blk);
    k.d = _cvtsh_ss(b->d.bits);
    k.dmin = 0.0f;
    const __m512i scales16 = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b->scales)));
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qh + 32 * h));
      // bytes 0..31: qh, bytes 32..63: qh >> 2 (the high bits of elements 32..63 of each chunk)
      const __m512i qh2 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
      const __m512i ha = _mm512_slli_epi16(_mm512_and_si512(qh2, m2), 4);
      const __m512i hb = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(qh2, 4), m2), 4);
      k.codes[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), ha);
      k.codes[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), hb);
    }
    for (int c = 0; c < 4; ++c) {
      const int s = 4 * c;
      const __m512i idx = _mm512_set_epi32(s + 3, s + 3, s + 3, s + 3, s + 2, s + 2, s + 2, s + 2, s + 1, s + 1, s + 1,
                                           s + 1, s, s, s, s);
      k.scales[c] = _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(idx, scales16));
    }
  }
}


TP_VNNI inline void kblock_store(const KBlock& k, char* dst) {
  for (int c = 0; c < 4; ++c) {
    _mm512_store_si512(dst + c * 64, k.codes[c]);
    _mm512_store_ps(dst + 256 + c * 64, k.scales[c]);
  }
  _mm256_store_si256(reinterpret_cast<__m256i*>(dst + 512), k.mins);
  std::memcpy(dst + 544, &k.d, 4);
  std::memcpy(dst + 548, &k.dmin, 4);
}

TP_VNNI inline void kblock_load(const char* src, KBlock& k) {
  for (int c = 0; c < 4; ++c) {
    k.codes[c] = _mm512_load_si512(src + c * 64);
    k.scales[c] = _mm512_load_ps(src + 256 + c * 64);
  }
  k.mins = _mm256_load_si256(reinterpret_cast<const __m256i*>(src + 512));
  std::memcpy(&k.d, src + 544, 4);
  std::memcpy(&k.dmin, src + 548, 4);
}

template <DType T>
TP_VNNI void kquant_unpack_row(const char* wrow, int64_t nsb, char* dst) {
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
TP_VNNI void kquant_dot(const char* wrow, int64_t nsb, const char* act, const ActLayout& l, float* res) {
  constexpr int64_t bb = dtype_block_bytes(T);
  __m512 acc[R];
  __m256 accm[R];
  TP_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
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
      // Per 64 weights: the exact int32 lane sums (Q6_K's -32 folded in by the accumulator's
      // start value), to f32, times the lanes' sub-block scales; the super-block's d x d_x once.
      __m512 sb = _mm512_setzero_ps();
      for (int c = 0; c < 4; ++c) {
        const __m512i init = T == DType::kQ6_K ? _mm512_load_si512(a + l.off_b + (s * kKQuantBlock + c * kChunk))
                                               : _mm512_setzero_si512();
        const __m512i dot = _mm512_dpbusd_epi32(init, k.codes[c], _mm512_load_si512(x + c * kChunk));
        sb = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), k.scales[c], sb);
      }
      const float dx = reinterpret_cast<const float*>(a + l.off_a)[s];
      if constexpr (T != DType::kQ6_K) {
        const __m256i s32 = _mm256_load_si256(reinterpret_cast<const __m256i*>(a + l.off_c + s * 32));
        accm[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_mullo_epi32(k.mins, s32)), _mm256_set1_ps(k.dmin * dx), accm[r]);
      }
      acc[r] = _mm512_fmadd_ps(sb, _mm512_set1_ps(k.d * dx), acc[r]);
    }
  }
  TP_UNROLL for (int r = 0; r < R; ++r) {
    float m = 0.0f;
    if constexpr (T != DType::kQ6_K) {
      const __m128 h = _mm_add_ps(_mm256_castps256_ps128(accm[r]), _mm256_extractf128_ps(accm[r], 1));
      alignas(16) float v[4];
      _mm_store_ps(v, h);
      m = (v[0] + v[2]) + (v[1] + v[3]);
    }
    res[r] = _mm512_reduce_add_ps(acc[r]) - m;
  }
}

}  // namespace vnni

struct Vnni512 {
  static constexpr int kWRows = 4;  // 4 x 4 accumulators of the 32 vector registers
  template <DType T, int W, int R, bool kUnpacked>
  static void legacy_dot(const char* const* w, int64_t nb, const char* act, const ActLayout& l, float* const* m,
                         float* res) {
    vnni::legacy_dot<T, W, R, kUnpacked>(w, nb, act, l, m, res);
  }
  template <DType T>
  static void legacy_unpack_row(const char* wrow, int64_t nb, char* dst, float* m) {
    vnni::legacy_unpack_row<T>(wrow, nb, dst, m);
  }
  template <DType T, int R, bool kUnpacked>
  static void kquant_dot(const char* wrow, int64_t nsb, const char* act, const ActLayout& l, float* res) {
    vnni::kquant_dot<T, R, kUnpacked>(wrow, nsb, act, l, res);
  }
  template <DType T>
  static void kquant_unpack_row(const char* wrow, int64_t nsb, char* dst) {
    vnni::kquant_unpack_row<T>(wrow, nsb, dst);
  }
};

}  // namespace

void run_vnni512(const Operands& o, DType t) { Driver<Vnni512>::run_type(o, t); }

}  // namespace tensorpar::int8_detail

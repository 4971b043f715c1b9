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

#include <cstddef>
#include <cstring>

#include "core/half.h"
#include "core/quant.h"
#include "kernels/cpu/avx512_reduce.h"
#include "kernels/cpu/int8_matmul_driver.h"
#include "kernels/cpu/unroll.h"

#define TP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace tensorpar::int8_detail {

namespace {

namespace vnni {

// ---- legacy blocks: 32 codes (unsigned, code = q + offset) per block, two blocks per 512 bits ----

// One Q8_0 block's codes (q + 128) and scale.
TP_VNNI inline __m256i q8_0_codes(const char* blk, float& d) {
  const auto* b = reinterpret_cast<const BlockQ8_0*>(blk);
  d = _cvtsh_ss(b->d.bits);
  return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b->qs)), _mm256_set1_epi8(char(0x80)));
}

// Where a 4- or 5-bit block keeps its nibbles, its fifth bits and its offset m (bytes; every
// field of these blocks starts at an even byte, so 16-bit permutes can gather them).
template <DType T>
constexpr int64_t qs_offset() {
  if constexpr (T == DType::kQ4_1) return offsetof(BlockQ4_1, qs);
  else if constexpr (T == DType::kQ5_0) return offsetof(BlockQ5_0, qs);
  else if constexpr (T == DType::kQ5_1) return offsetof(BlockQ5_1, qs);
  else if constexpr (T == DType::kIQ4_NL) return offsetof(BlockIQ4_NL, qs);
  else return offsetof(BlockQ4_0, qs);
}
template <DType T>
constexpr int64_t qh_offset() {
  return T == DType::kQ5_1 ? offsetof(BlockQ5_1, qh) : offsetof(BlockQ5_0, qh);
}

// The 16-bit word indices that gather two blocks (at words 0 and bb / 2 of one load) as the
// kernel multiplies them. Nibbles: each 128-bit lane one block's 16 bytes of qs, twice (lanes 0-1
// block b, 2-3 block b+1; the second copy is shifted right by 4: the high nibbles, elements 16-31).
// Scales: the two f16 d words, each in 8 consecutive words (lanes 0-7 and 8-15 after widening).
template <DType T>
struct PairWords {
  alignas(64) int16_t nibbles[32];
  alignas(64) int16_t scales[32];
  constexpr PairWords() : nibbles(), scales() {
    constexpr int bw = int(dtype_block_bytes(T) / 2), qw = int(qs_offset<T>() / 2);
    for (int i = 0; i < 32; ++i) {
      nibbles[i] = int16_t((i / 16) * bw + qw + i % 8);
      scales[i] = int16_t(i >= 8 && i < 16 ? bw : 0);
    }
  }
};

// The codes and scales of blocks b and b+1 (b+1 < nb, else zeros) of one weight row as the
// kernel multiplies them: 64 codes and the 16 lanes' f32 scales. The 4- and 5-bit types take
// both blocks in one masked load and two word permutes; Q8_0 (two blocks: 68 bytes) one block at
// a time.
template <DType T>
TP_VNNI inline void legacy_pair(const char* wrow, int64_t b, int64_t nb, __m512i& codes, __m512& dw, float& m0, float& m1) {
  constexpr int64_t bb = dtype_block_bytes(T);
  const bool two = b + 1 < nb;
  const char* blk = wrow + b * bb;
  m0 = m1 = 0.0f;
  if constexpr (T == DType::kQ8_0) {
    float d0, d1 = 0.0f;
    const __m256i c0 = q8_0_codes(blk, d0);
    __m256i c1 = _mm256_setzero_si256();
    if (two) c1 = q8_0_codes(blk + bb, d1);
    codes = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
    dw = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1), 1);
  } else {
    static_assert(2 * bb <= 64 && bb % 2 == 0);
    static constexpr PairWords<T> kWords;
    const __mmask32 words = __mmask32((uint64_t(1) << (two ? bb : bb / 2)) - 1);
    const __m512i raw = _mm512_maskz_loadu_epi16(words, blk);
    __m512i q = _mm512_permutexvar_epi16(_mm512_load_si512(kWords.nibbles), raw);
    q = _mm512_and_si512(_mm512_mask_srli_epi16(q, __mmask32(0xff00ff00u), q, 4), _mm512_set1_epi8(0x0f));
    dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(_mm512_load_si512(kWords.scales), raw)));
    if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1) {
      uint32_t h0, h1 = 0;
      std::memcpy(&h0, blk + qh_offset<T>(), 4);
      if (two) std::memcpy(&h1, blk + bb + qh_offset<T>(), 4);
      q = _mm512_mask_add_epi8(q, __mmask64(h0 | uint64_t(h1) << 32), q, _mm512_set1_epi8(16));
    }
    if constexpr (T == DType::kQ4_1 || T == DType::kQ5_1) {
      constexpr int64_t mo = T == DType::kQ4_1 ? offsetof(BlockQ4_1, m) : offsetof(BlockQ5_1, m);
      uint16_t h;
      std::memcpy(&h, blk + mo, 2);
      m0 = _cvtsh_ss(h);
      if (two) {
        std::memcpy(&h, blk + bb + mo, 2);
        m1 = _cvtsh_ss(h);
      }
    }
    if constexpr (T == DType::kIQ4_NL) {
      const __m512i table = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
      q = _mm512_xor_si512(_mm512_shuffle_epi8(table, q), _mm512_set1_epi8(char(0x80)));
      if (!two) q = _mm512_maskz_mov_epi64(0x0f, q);  // a missing block's codes are 0, as its scale
    }
    codes = q;
  }
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

// The q4_1 / q5_1 offset term of one weight row (its block offsets m) and one input row a:
// sum_b m_b * s_b.
TP_VNNI inline float offset_term(const float* m, const char* a, const ActLayout& l, int64_t nb) {
  const float* sx = reinterpret_cast<const float*>(a + l.off_c);
  __m512 macc = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 16 <= nb; b += 16) macc = _mm512_fmadd_ps(_mm512_loadu_ps(m + b), _mm512_loadu_ps(sx + b), macc);
  const __mmask16 tail = __mmask16((1u << (nb - b)) - 1);
  macc = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, m + b), _mm512_maskz_loadu_ps(tail, sx + b), macc);
  return _mm512_reduce_add_ps(macc);
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
      if constexpr (kOffsetTerm) v += offset_term(m[i], act + r * l.row_bytes, l, nb);
      res[i * kRows + r] = v;
    }
}

// One input row (R = 1) against `rows` (<= kWTile, one tile) consecutive weight rows as stored,
// ldw bytes apart, walked one after another (one stream through memory); m: kWTile rows of
// offsets, ms apart. Each row's accumulator runs exactly legacy_dot<T, 1, 1, false>'s instructions in its
// order; the eight are summed together (reduce_add_8: the same lane tree as
// _mm512_reduce_add_ps), so no row waits on its own reduction before the next one starts.
template <DType T>
TP_VNNI void legacy_stream(const char* w, int64_t ldw, int rows, int64_t nb, const char* act, const ActLayout& l,
                           float* m, int64_t ms, float* res) {
  constexpr int64_t bb = dtype_block_bytes(T);
  constexpr bool kOffsetTerm = T == DType::kQ4_1 || T == DType::kQ5_1;
  static_assert(kWTile == 8, "reduce_add_8 sums a tile's 8 accumulators");
  __m512 acc[kWTile];
  TP_UNROLL for (int i = 0; i < kWTile; ++i) {
    acc[i] = _mm512_setzero_ps();
    if (i >= rows) continue;
    const char* wrow = w + i * ldw;
    float* mi = m + i * ms;
    for (int64_t b = 0; b < nb; b += 2) {
      __m512i codes;
      __m512 dw;
      float m0, m1;
      _mm_prefetch(wrow + b * bb + kPrefetchBytes, _MM_HINT_T0);
      legacy_pair<T>(wrow, b, nb, codes, dw, m0, m1);
      if constexpr (kOffsetTerm) {
        mi[b] = m0;
        if (b + 1 < nb) mi[b + 1] = m1;
      }
      const __m512i x = _mm512_load_si512(act + b * kQuantBlock);
      const __m512i corr = _mm512_load_si512(act + l.off_b + b * 32);
      const __m512 dx = _mm512_load_ps(reinterpret_cast<const float*>(act + l.off_a) + b * 8);
      const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(corr, codes, x)), dx);
      acc[i] = _mm512_fmadd_ps(t, dw, acc[i]);
    }
  }
  alignas(32) float sums[kWTile];
  _mm256_store_ps(sums, reduce_add_8(acc));
  for (int i = 0; i < rows; ++i) {
    float v = sums[i];
    if constexpr (kOffsetTerm) v += offset_term(m + i * ms, act, l, nb);
    res[i * kRows] = v;
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
  static constexpr bool kStreamsRows = true;
  template <DType T>
  static void legacy_stream(const char* w, int64_t ldw, int rows, int64_t nb, const char* act, const ActLayout& l,
                            float* m, int64_t ms, float* res) {
    vnni::legacy_stream<T>(w, ldw, rows, nb, act, l, m, ms, res);
  }
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

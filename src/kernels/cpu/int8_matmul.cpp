// The int8-activation matmul (see int8_matmul.h).
//
// Layout. Each input row is quantized once per call into scratch, padded to a multiple of 64
// elements with zeros, beside per-lane side data so that the weight-row loop needs no scalar work
// per activation block: a VPDPBUSD lane holds the sum of 4 products, so 64 elements are 16 lanes
// and a 32-element block is 8 lanes.
// - Legacy weight types (blocks of 32): dx (the block's f16 scale, in each of its 8 lanes),
//   corr (-offset x the lane's 4 activation codes: the weight codes are stored unsigned, code =
//   q + offset, so sum (code - offset) * x = VPDPBUSD(corr, code, x)), and per block sx = d x
//   sum q (the q4_1 / q5_1 offset term m's factor).
// - K-quants (super-blocks of 256): d (f32), corr lanes as above for Q6_K (codes q + 32), and the
//   sums of each 32 codes (the Q4_K / Q5_K mins term).
// The kernels run up to 4 weight rows (legacy types; one for K-quants) against up to 4 input
// rows: weight codes unpacked once into registers, one VPDPBUSD per (pair, 64 weights), the
// integer lanes scaled in f32 per block (legacy) or by the lanes' sub-block scales and then once
// per super-block by d (K-quants).
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/cpu/int8_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "kernels/cpu/unroll.h"

#define TP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace tensorpar {

namespace {

constexpr int64_t kChunk = 64;  // activations per 512-bit vector of int8
constexpr int kRows = 4;        // input rows per register block
// Weight bytes ahead of the current block that the kernels ask the cache for: the hardware
// prefetcher alone leaves a decode-sized stream latency-bound (odd-sized blocks, short rows).
constexpr int64_t kPrefetchBytes = 2048;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

bool has_kernel(DType t) {
  switch (t) {
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ8_0:
    case DType::kIQ4_NL: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

// The unsigned offset of a legacy type's weight codes (code = q + offset, q the signed value).
constexpr int legacy_offset(DType t) {
  return t == DType::kQ4_0 ? 8 : t == DType::kQ5_0 ? 16 : (t == DType::kQ8_0 || t == DType::kIQ4_NL) ? 128 : 0;
}

// Where each part of one quantized input row lives in scratch (byte offsets, all 64-aligned).
struct ActLayout {
  int64_t k = 0, kp = 0, row_bytes = 0;
  int64_t off_a = 0, off_b = 0, off_c = 0;  // legacy: dx, corr, sx; K-quants: d, corr (Q6_K), sums32
};

ActLayout act_layout(int64_t K, DType t) {
  ActLayout l;
  l.k = K;
  l.kp = round_up(std::max<int64_t>(K, 1), kChunk);
  if (dtype_is_kquant(t)) {
    const int64_t nsb = l.kp / kKQuantBlock + 1;
    l.off_a = l.kp;
    l.off_b = l.off_a + round_up(nsb * 4, 64);
    l.off_c = l.off_b + l.kp;  // kp / 4 lanes of int32
    l.row_bytes = l.off_c + round_up(nsb * 8 * 4, 64);
  } else {
    const int64_t lanes = l.kp / 4;
    l.off_a = l.kp;
    l.off_b = l.off_a + lanes * 4;
    l.off_c = l.off_b + lanes * 4;
    l.row_bytes = l.off_c + lanes * 4;
  }
  return l;
}

}  // namespace

void int8_quantize_activations(const float* x, int64_t n, DType weight_type, int8_t* q, float* block_scales) {
  if (dtype_is_kquant(weight_type)) {
    for (int64_t b = 0; b < n / kKQuantBlock; ++b) {
      const float* xb = x + b * kKQuantBlock;
      float amax = 0.0f, max = 0.0f;
      for (int i = 0; i < kKQuantBlock; ++i)
        if (std::fabs(xb[i]) > amax) amax = std::fabs(xb[i]), max = xb[i];
      int8_t* qb = q + b * kKQuantBlock;
      if (amax == 0.0f) {
        std::memset(qb, 0, kKQuantBlock);
        block_scales[b] = 0.0f;
        continue;
      }
      const float iscale = -127.0f / max;
      for (int i = 0; i < kKQuantBlock; ++i)
        qb[i] = int8_t(std::min(127, int(std::nearbyint(iscale * xb[i]))));
      block_scales[b] = 1.0f / iscale;
    }
    return;
  }
  for (int64_t b = 0; b < n / kQuantBlock; ++b) {
    const float* xb = x + b * kQuantBlock;
    float amax = 0.0f;
    for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(xb[i]));
    const float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int i = 0; i < kQuantBlock; ++i) q[b * kQuantBlock + i] = int8_t(std::nearbyint(xb[i] * id));
    block_scales[b] = f16_to_f32(f32_to_f16(d));
  }
}

namespace {

// One input row into its layout (dst: row_bytes, zero-padded).
void quantize_row_into(const float* x, const ActLayout& l, DType t, char* dst) {
  std::memset(dst, 0, size_t(l.row_bytes));
  auto* q = reinterpret_cast<int8_t*>(dst);
  if (dtype_is_kquant(t)) {
    const int64_t nsb = l.k / kKQuantBlock;
    auto* d = reinterpret_cast<float*>(dst + l.off_a);
    auto* corr = reinterpret_cast<int32_t*>(dst + l.off_b);
    auto* s32 = reinterpret_cast<int32_t*>(dst + l.off_c);
    int8_quantize_activations(x, l.k, t, q, d);
    for (int64_t b = 0; b < nsb; ++b)
      for (int g = 0; g < 16; ++g) {
        int32_t s = 0;
        for (int i = 0; i < 16; ++i) s += q[b * kKQuantBlock + g * 16 + i];
        s32[b * 8 + g / 2] += s;
        for (int lane = 0; lane < 4; ++lane) {  // Q6_K's codes are q + 32
          const int64_t i0 = b * kKQuantBlock + g * 16 + lane * 4;
          corr[i0 / 4] = -32 * (q[i0] + q[i0 + 1] + q[i0 + 2] + q[i0 + 3]);
        }
      }
    return;
  }
  const int64_t nb = l.k / kQuantBlock;
  auto* dx = reinterpret_cast<float*>(dst + l.off_a);
  auto* corr = reinterpret_cast<int32_t*>(dst + l.off_b);
  auto* sx = reinterpret_cast<float*>(dst + l.off_c);
  const float* scales = sx;  // block b's scale sits in sx[b] until sx[b] is written below
  int8_quantize_activations(x, l.k, t, q, sx);
  const int offset = legacy_offset(t);
  for (int64_t b = 0; b < nb; ++b) {
    int32_t sum = 0;
    for (int lane = 0; lane < 8; ++lane) {
      int32_t s4 = 0;
      for (int i = 0; i < 4; ++i) s4 += q[b * kQuantBlock + lane * 4 + i];
      sum += s4;
      dx[b * 8 + lane] = scales[b];
      corr[b * 8 + lane] = -offset * s4;
    }
    sx[b] = scales[b] * float(sum);
  }
}

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

// Weight rows per register block of the legacy kernel with several input rows (rows past N
// repeat the last row; their results are dropped). One input row (decode) streams one weight row
// at a time, which keeps the loads ahead of the arithmetic. Each (weight row, input row) pair
// runs the same instructions in the same order whatever its block, so results do not depend on it.
constexpr int kWRows = 4;

// The codes and scales of blocks b and b+1 (b+1 < nb, else zeros) of one weight row as the
// kernel multiplies them: 64 codes and the 16 lanes' f32 scales.
template <DType T>
TP_VNNI inline void legacy_pair(const char* wrow, int64_t b, int64_t nb, __m512i& codes, __m512& dw, float& m0, float& m1) {
  const int64_t bb = dtype_block_bytes(T);
  float d0, d1 = 0.0f;
  m1 = 0.0f;
  const __m256i c0 = legacy_codes<T>(wrow + b * bb, d0, m0);
  __m256i c1 = _mm256_setzero_si256();
  if (b + 1 < nb) c1 = legacy_codes<T>(wrow + (b + 1) * bb, d1, m1);
  codes = _mm512_inserti64x4(_mm512_castsi256_si512(c0), c1, 1);
  dw = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(d0)), _mm256_set1_ps(d1), 1);
}

// Bytes of one weight row unpacked for reuse over many input rows: per pair of blocks the 64
// codes and the 16 lane scales.
int64_t legacy_unpacked_bytes(int64_t nb) { return (nb + 1) / 2 * 128; }

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
  const int64_t bb = dtype_block_bytes(T);
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

TP_VNNI inline __m512i lane_scales8(const int32_t* s8, int c) {
  // lanes 0..7 -> sub-block 2c, lanes 8..15 -> 2c+1
  const __m512i idx = _mm512_set_epi32(2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1, 2 * c + 1,
                                       2 * c + 1, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c, 2 * c);
  return _mm512_permutexvar_epi32(idx, _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(s8))));
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
    alignas(32) int32_t sc[8], mn[8];
    for (int j = 0; j < 8; ++j) kquant_scale_min(scales, j, sc[j], mn[j]);
    k.mins = _mm256_load_si256(reinterpret_cast<const __m256i*>(mn));
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

// A super-block unpacked for reuse over many input rows: codes, lane scales, mins, d and dmin.
constexpr int64_t kKBlockBytes = 4 * 64 + 4 * 64 + 32 + 32;

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
  const int64_t bb = dtype_block_bytes(T);
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
  const int64_t bb = dtype_block_bytes(T);
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

struct Operands {
  const char* w;
  int64_t ldw;  // bytes between weight rows
  int64_t n, nb;
  const char* act;
  ActLayout l;
  int64_t m;
  float* out;
  int64_t ldo;
  const float* bias;
};

// Weight rows in tiles (a tile stays in L1 while every group of kRows input rows passes).
constexpr int64_t kWTile = 8;

// Per-thread scratch of a tile: the legacy offsets (m) and, when several groups of
// input rows pass a tile, its rows unpacked once.
struct TileScratch {
  std::vector<float> m;
  char* unpacked = nullptr;
  int64_t row_bytes = 0;
};

// Tile rows [n0, n1) against one group of R input rows.
template <DType T, int R>
void legacy_rows(const Operands& o, int64_t n0, int64_t n1, const char* act, TileScratch& sc, float* res) {
  const int64_t ms = o.nb + 1;
  if constexpr (R == 1) {
    if (sc.unpacked == nullptr) {
      for (int64_t n = n0; n < n1; ++n) {
        const char* w = o.w + n * o.ldw;
        float* m = sc.m.data() + (n - n0) * ms;
        legacy_dot<T, 1, 1, false>(&w, o.nb, act, o.l, &m, res + (n - n0) * kRows);
      }
      return;
    }
  }
  for (int64_t n = n0; n < n1; n += kWRows) {
    const char* w[kWRows];
    float* m[kWRows];
    for (int i = 0; i < kWRows; ++i) {
      const int64_t t = std::min(n + i, n1 - 1) - n0;
      w[i] = sc.unpacked ? sc.unpacked + t * sc.row_bytes : o.w + (n0 + t) * o.ldw;
      m[i] = sc.m.data() + t * ms;
    }
    if (sc.unpacked) legacy_dot<T, kWRows, R, true>(w, o.nb, act, o.l, m, res + (n - n0) * kRows);
    else legacy_dot<T, kWRows, R, false>(w, o.nb, act, o.l, m, res + (n - n0) * kRows);
  }
}

template <DType T, int R>
void kquant_rows(const Operands& o, int64_t n0, int64_t n1, const char* act, const TileScratch& sc, float* res) {
  for (int64_t n = n0; n < n1; ++n) {
    if (sc.unpacked) kquant_dot<T, R, true>(sc.unpacked + (n - n0) * sc.row_bytes, o.nb, act, o.l, res + (n - n0) * kRows);
    else kquant_dot<T, R, false>(o.w + n * o.ldw, o.nb, act, o.l, res + (n - n0) * kRows);
  }
}

template <DType T, int R>
void tile_rows(const Operands& o, int64_t n0, int64_t n1, const char* act, TileScratch& sc, float* res) {
  if constexpr (dtype_is_kquant(T)) kquant_rows<T, R>(o, n0, n1, act, sc, res);
  else legacy_rows<T, R>(o, n0, n1, act, sc, res);
}

template <DType T>
void run_type(const Operands& o) {
  const int64_t tiles = (o.n + kWTile - 1) / kWTile;
#pragma omp parallel if (o.n * o.l.k * o.m > (int64_t(1) << 16))
  {
    // Several groups of input rows per tile: its rows are unpacked once.
    const bool unpack = o.m > kRows;
    TileScratch sc;
    sc.m.resize(static_cast<size_t>(kWTile * (o.nb + 1)));
    std::shared_ptr<void> unpacked;
    if (unpack) {
      sc.row_bytes = dtype_is_kquant(T) ? o.nb * kKBlockBytes : legacy_unpacked_bytes(o.nb);
      unpacked = aligned_alloc_shared(kWTile * sc.row_bytes);
    }
    float res[(kWTile + kWRows) * kRows];
#pragma omp for schedule(static)
    for (int64_t t = 0; t < tiles; ++t) {
      const int64_t n0 = t * kWTile, n1 = std::min(o.n, n0 + kWTile);
      if (unpack) {
        sc.unpacked = static_cast<char*>(unpacked.get());
        for (int64_t n = n0; n < n1; ++n) {
          char* dst = sc.unpacked + (n - n0) * sc.row_bytes;
          if constexpr (dtype_is_kquant(T)) kquant_unpack_row<T>(o.w + n * o.ldw, o.nb, dst);
          else legacy_unpack_row<T>(o.w + n * o.ldw, o.nb, dst, sc.m.data() + (n - n0) * (o.nb + 1));
        }
      }
      for (int64_t m0 = 0; m0 < o.m; m0 += kRows) {
        const int rows = int(std::min<int64_t>(kRows, o.m - m0));
        const char* act = o.act + m0 * o.l.row_bytes;
        switch (rows) {
          case 4: tile_rows<T, 4>(o, n0, n1, act, sc, res); break;
          case 3: tile_rows<T, 3>(o, n0, n1, act, sc, res); break;
          case 2: tile_rows<T, 2>(o, n0, n1, act, sc, res); break;
          default: tile_rows<T, 1>(o, n0, n1, act, sc, res); break;
        }
        for (int64_t n = n0; n < n1; ++n) {
          const float b = o.bias ? o.bias[n] : 0.0f;
          for (int r = 0; r < rows; ++r) o.out[(m0 + r) * o.ldo + n] = res[(n - n0) * kRows + r] + b;
        }
      }
    }
  }
}

// The quantized kernels' AVX-512 set (F, BW, VL, with AVX2, FMA, F16C) plus DQ and VNNI.
bool cpu_has_vnni512() {
  static const bool has = quant_detail::cpu_has_avx512() && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512vnni");
  return has;
}

void check_operands(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias, const char* where) {
  const DType t = weight.dtype();
  TP_CHECK(dtype_is_quantized(t) && weight.ndim() == 2 && weight.strides()[1] == 1 &&
               weight.dim(1) % dtype_block_elems(t) == 0 && weight.strides()[0] % dtype_block_elems(t) == 0,
           "[", where, "] weight: got ", weight.describe(),
           ", expected a 2-D block-quantized tensor with whole contiguous blocks per row");
  TP_CHECK(in.ndim() == 2 && in.dtype() == DType::kF32 && in.dim(1) == weight.dim(1) && in.strides()[1] == 1, "[",
           where, "] in: got ", in.describe(), ", expected f32 (M,", weight.dim(1), ") with unit column stride");
  TP_CHECK(out.ndim() == 2 && out.dtype() == DType::kF32 && out.dim(0) == in.dim(0) && out.dim(1) == weight.dim(0) &&
               out.strides()[1] == 1,
           "[", where, "] out: got ", out.describe(), ", expected f32 (", in.dim(0), ",", weight.dim(0),
           ") with unit column stride");
  TP_CHECK(!bias || (bias->ndim() == 1 && bias->dim(0) == weight.dim(0) && bias->dtype() == DType::kF32 &&
                     bias->is_contiguous()),
           "[", where, "] bias: got ", bias ? bias->describe() : "", ", expected contiguous f32[", weight.dim(0), "]");
}

}  // namespace

bool int8_matmul_usable(DType t) { return has_kernel(t) && cpu_has_vnni512(); }

int64_t int8_matmul_scratch_bytes(int64_t M, int64_t K, DType t) {
  return std::max<int64_t>(M, 1) * act_layout(K, t).row_bytes;
}

void int8_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias, void* scratch) {
  check_operands(out, in, weight, bias, "int8_matmul_forward");
  const DType t = weight.dtype();
  TP_CHECK(int8_matmul_usable(t), "[int8_matmul_forward] no int8 kernel for ", dtype_name(t),
           " weights on this CPU (needs AVX512-VNNI)");
  TP_CHECK(reinterpret_cast<uintptr_t>(scratch) % 64 == 0, "[int8_matmul_forward] scratch must be 64-byte aligned");
  const int64_t M = in.dim(0), K = in.dim(1), be = dtype_block_elems(t);
  if (out.numel() == 0) return;
  Operands o;
  o.l = act_layout(K, t);
  o.w = static_cast<const char*>(weight.raw());
  o.ldw = weight.strides()[0] / be * dtype_block_bytes(t);
  o.n = weight.dim(0);
  o.nb = K / be;
  o.act = static_cast<const char*>(scratch);
  o.m = M;
  o.out = out.data<float>();
  o.ldo = out.strides()[0];
  o.bias = bias ? bias->data<float>() : nullptr;
  const float* x = in.data<float>();
  const int64_t ldx = in.strides()[0];
  char* act = static_cast<char*>(scratch);
#pragma omp parallel for schedule(static) if (M * K > (int64_t(1) << 16))
  for (int64_t m = 0; m < M; ++m) quantize_row_into(x + m * ldx, o.l, t, act + m * o.l.row_bytes);
  switch (t) {
    case DType::kQ4_0: run_type<DType::kQ4_0>(o); break;
    case DType::kQ4_1: run_type<DType::kQ4_1>(o); break;
    case DType::kQ5_0: run_type<DType::kQ5_0>(o); break;
    case DType::kQ5_1: run_type<DType::kQ5_1>(o); break;
    case DType::kQ8_0: run_type<DType::kQ8_0>(o); break;
    case DType::kIQ4_NL: run_type<DType::kIQ4_NL>(o); break;
    case DType::kQ4_K: run_type<DType::kQ4_K>(o); break;
    case DType::kQ5_K: run_type<DType::kQ5_K>(o); break;
    default: run_type<DType::kQ6_K>(o); break;
  }
}

void int8_matmul_reference(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  check_operands(out, in, weight, bias, "int8_matmul_reference");
  const DType t = weight.dtype();
  TP_CHECK(has_kernel(t), "[int8_matmul_reference] no int8 rule for ", dtype_name(t), " weights");
  const int64_t M = in.dim(0), K = in.dim(1), N = weight.dim(0), be = dtype_block_elems(t);
  const int64_t ldw = weight.strides()[0] / be * dtype_block_bytes(t);
  const int64_t block = dtype_is_kquant(t) ? kKQuantBlock : kQuantBlock;
  std::vector<float> w(static_cast<size_t>(K)), xd(static_cast<size_t>(K)), scales(static_cast<size_t>(K / block + 1));
  std::vector<int8_t> q(static_cast<size_t>(K));
  for (int64_t m = 0; m < M; ++m) {
    int8_quantize_activations(in.data<float>() + m * in.strides()[0], K, t, q.data(), scales.data());
    for (int64_t i = 0; i < K; ++i) xd[size_t(i)] = scales[size_t(i / block)] * float(q[size_t(i)]);
    for (int64_t n = 0; n < N; ++n) {
      dequantize_row(w.data(), static_cast<const char*>(weight.raw()) + n * ldw, t, K);
      double s = bias ? double(bias->data<float>()[n]) : 0.0;
      for (int64_t i = 0; i < K; ++i) s += double(w[size_t(i)]) * double(xd[size_t(i)]);
      out.data<float>()[m * out.strides()[0] + n] = float(s);
    }
  }
}

}  // namespace tensorpar

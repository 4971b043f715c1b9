// The int8-activation kernels for row-packed weights (int8_packed.h) on AVX2 with FMA and F16C:
// every packable type (the 32-weight ones, Q4_K, Q5_K, Q6_K).
//
// A packed 64-byte register is two 256-bit vectors whose 8 int32 lanes are the 8 rows of the
// group, 4 weights each: the first the rows' bytes 0-3, the second bytes 4-7. So every lane of a
// product is one row, the activations a vector multiplies are one dword broadcast from memory,
// and nothing is summed across lanes. Products as in avx2_int8.h (VPMADDUBSW, then VPMADDWD);
// the int16 pair sums of several vectors are added before the widening while they cannot
// overflow (|pair| <= 2 x code x 127: 4-bit codes 8 vectors, 5-bit 4, Q6_K's 6-bit 2), and the
// K-quants' widening multiplies by the rows' sub-block scales at once (VPMADDWD against each
// lane's scale in both halves). Q8_0 and IQ4_NL codes are multiplied signed.
// Per block (legacy types) the exact int32 row sums to f32, times the input's block scale and the
// 8 rows' scales; per super-block (K-quants) the exact int32 sums of scaled sub-blocks to f32
// once, times d (minus the mins' term times dmin). Every (weight row, input row) pair runs the
// same instructions in the same order whatever the batch (PackedDriver).
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/quant.h"
#include "kernels/cpu/avx2_int8.h"
#include "kernels/cpu/int8_matmul_driver.h"
#include "kernels/cpu/int8_packed.h"
#include "kernels/cpu/unroll.h"

namespace tensorpar::int8_detail {

namespace {

using namespace int8_packed;

// Dword i of an activation row's codes in every lane.
TP_AVX2 inline __m256i act_dword(const char* x, int i) {
  int32_t v;
  std::memcpy(&v, x + 4 * i, 4);
  return _mm256_set1_epi32(v);
}

// The 8 rows' f16 values at p, as f32 lanes.
TP_AVX2 inline __m256 rows_f16(const char* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

TP_AVX2 inline __m256i load256(const char* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The cache lines kPrefetchBytes ahead of a block of kBytes at p.
template <int64_t kBytes>
TP_AVX2 inline void prefetch_ahead(const char* p) {
  TP_UNROLL for (int64_t i = 0; i < kBytes; i += 64) _mm_prefetch(p + kPrefetchBytes + i, _MM_HINT_T0);
}

TP_AVX2 inline __m256i widen16(__m256i pairs) { return _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)); }

// Signed codes x activation dword i, 4 products per lane.
TP_AVX2 inline __m256i signed_lanes(__m256i q, const char* x, int i) { return dot_s8s8(q, act_dword(x, i)); }

// Int32 lanes v (each within int16) as the int16 pair (v, v) VPMADDWD multiplies both halves by.
TP_AVX2 inline __m256i both_int16(__m256i v) {
  return _mm256_or_si256(_mm256_and_si256(v, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(v, 16));
}

// Int32 lanes a and b (each within int16) as the int16 pairs (a, b).
TP_AVX2 inline __m256i int16_pairs(__m256i a, __m256i b) {
  return _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(b, 16));
}

// Two int32 values (each within int16) as the int16 pair (a, b) in every lane.
TP_AVX2 inline __m256i pair_in_every_lane(int32_t a, int32_t b) {
  return _mm256_set1_epi32(int32_t((uint32_t(a) & 0xffffu) | uint32_t(b) << 16));
}

// Bytes 8 j .. 8 j + 7 of a 64-byte table held as two vectors (lo: bytes 0-31), as int32 lanes.
template <bool kSigned>
TP_AVX2 inline __m256i table_row(const __m256i (&t)[2], int j) {
  const __m256i v = t[j / 4];
  const __m128i half = (j % 4) / 2 ? _mm256_extracti128_si256(v, 1) : _mm256_castsi256_si128(v);
  const __m128i bytes = j % 2 ? _mm_srli_si128(half, 8) : half;
  return kSigned ? _mm256_cvtepi8_epi32(bytes) : _mm256_cvtepu8_epi32(bytes);
}

// ---- the 32-weight types ----

constexpr bool signed_codes(DType t) { return t == DType::kQ8_0 || t == DType::kIQ4_NL; }

// The code vectors of one block: vector v multiplies activation dword dword_of<T>(v).
template <DType T>
constexpr int dword_of(int v) {
  // 4-bit types: v = 2 k + h, k the 64-code register (low nibbles of bytes 0-63, their high
  // nibbles, low of 64-127, high), h its half; Q8_0: v = 2 c + h over 4 registers of 64 codes.
  if constexpr (T == DType::kQ8_0) return v;
  else return (v / 2 == 0 ? 0 : v / 2 == 1 ? 4 : v / 2 == 2 ? 2 : 6) + v % 2;
}

template <DType T>
TP_AVX2 inline void block_codes(const char* codes, const char* extras, __m256i (&c)[8]) {
  if constexpr (T == DType::kQ8_0) {
    const __m256i flip = _mm256_set1_epi8(char(0x80));  // stored q + 128: back to q
    TP_UNROLL for (int v = 0; v < 8; ++v) c[v] = _mm256_xor_si256(load256(codes + 32 * v), flip);
  } else {
    const __m256i m4 = _mm256_set1_epi8(0x0f);
    TP_UNROLL for (int h = 0; h < 2; ++h) {
      const __m256i r0 = load256(codes + 32 * h), r1 = load256(codes + 64 + 32 * h);
      c[0 + h] = _mm256_and_si256(r0, m4);
      c[2 + h] = _mm256_and_si256(_mm256_srli_epi16(r0, 4), m4);
      c[4 + h] = _mm256_and_si256(r1, m4);
      c[6 + h] = _mm256_and_si256(_mm256_srli_epi16(r1, 4), m4);
    }
    if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1) {
      const __m256i sixteen = _mm256_set1_epi8(16);
      TP_UNROLL for (int v = 0; v < 8; ++v) {
        uint32_t bits;
        std::memcpy(&bits, extras + offset_qh(T) + 4 * v, 4);  // mask v / 2, half v % 2
        c[v] = _mm256_add_epi8(c[v], _mm256_and_si256(bytes_from_bits(bits), sixteen));
      }
    }
    if constexpr (T == DType::kIQ4_NL) {
      const __m256i table =
          _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
      TP_UNROLL for (int v = 0; v < 8; ++v) c[v] = _mm256_shuffle_epi8(table, c[v]);
    }
  }
}

// The exact sum over one block of (code - offset) x activation code, lanes = rows.
template <DType T>
TP_AVX2 inline __m256i block_dot(const __m256i (&c)[8], const char* x, int32_t code_sum) {
  if constexpr (signed_codes(T)) {
    __m256i dot = signed_lanes(c[0], x, dword_of<T>(0));
    TP_UNROLL for (int v = 1; v < 8; ++v) dot = _mm256_add_epi32(dot, signed_lanes(c[v], x, dword_of<T>(v)));
    return dot;
  } else {
    // Pair sums below 2 x 15 x 127 (4-bit) add 8 at a time in int16, below 2 x 31 x 127 4.
    constexpr int kPerWiden = T == DType::kQ5_0 || T == DType::kQ5_1 ? 4 : 8;
    __m256i dot = _mm256_set1_epi32(-legacy_offset(T) * code_sum);
    TP_UNROLL for (int v0 = 0; v0 < 8; v0 += kPerWiden) {
      __m256i s = _mm256_maddubs_epi16(c[v0], act_dword(x, dword_of<T>(v0)));
      TP_UNROLL for (int v = v0 + 1; v < v0 + kPerWiden; ++v)
        s = _mm256_add_epi16(s, _mm256_maddubs_epi16(c[v], act_dword(x, dword_of<T>(v))));
      dot = _mm256_add_epi32(dot, widen16(s));
    }
    return dot;
  }
}

template <DType T, int R>
TP_AVX2 void legacy_group(const char* group, int64_t nb, const char* act, const ActLayout& l, float* res) {
  constexpr int64_t bb = block_bytes(T);
  constexpr bool kOffsetTerm = T == DType::kQ4_1 || T == DType::kQ5_1;
  __m256 acc[R], accm[R];
  TP_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), accm[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const char* codes = group + b * bb;
    const char* ex = codes + code_bytes(T);
    prefetch_ahead<bb>(codes);
    __m256i c[8];
    block_codes<T>(codes, ex, c);
    const __m256 dw = rows_f16(ex + kScaleOffset);
    TP_UNROLL for (int r = 0; r < R; ++r) {
      const char* a = act + r * l.row_bytes;
      const int32_t code_sum = reinterpret_cast<const int32_t*>(a + l.off_d)[b];
      const __m256i dot = block_dot<T>(c, a + b * kQuantBlock, code_sum);
      const float dx = reinterpret_cast<const float*>(a + l.off_a)[b * 8];
      acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(dx)), dw, acc[r]);
      if constexpr (kOffsetTerm)
        accm[r] = _mm256_fmadd_ps(rows_f16(ex + offset_m(T)),
                                  _mm256_set1_ps(reinterpret_cast<const float*>(a + l.off_c)[b]), accm[r]);
    }
  }
  TP_UNROLL for (int r = 0; r < R; ++r)
    _mm256_storeu_ps(res + r * kPackedRows, kOffsetTerm ? _mm256_add_ps(acc[r], accm[r]) : acc[r]);
}

// ---- K-quants ----

// Q4_K / Q5_K: per chunk c of 64 weights, sub-blocks 2 c (low nibbles) and 2 c + 1 (high).
template <DType T, int R>
TP_AVX2 void k4_group(const char* group, int64_t nsb, const char* act, const ActLayout& l, float* res) {
  constexpr int64_t bb = block_bytes(T);
  // 4-bit codes: the 8 vectors of a sub-block add in int16; 5-bit: 4 at a time.
  constexpr int kPerWiden = T == DType::kQ5_K ? 4 : 8;
  const __m256i m4 = _mm256_set1_epi8(0x0f), three = _mm256_set1_epi8(3);
  __m256 acc[R];
  TP_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const char* codes = group + s * bb;
    const char* ex = codes + code_bytes(T);
    prefetch_ahead<bb>(codes);
    // The 64 (sub-block j, row r) scales and mins, byte 8 j + r.
    const char* enc = ex + offset_kscales(T);
    const __m256i hb = load256(enc + 64);
    __m256i sc[2], mn[2];
    TP_UNROLL for (int h = 0; h < 2; ++h) {
      const __m256i lo = load256(enc + 32 * h);
      const __m256i hi = _mm256_and_si256(h ? _mm256_srli_epi16(hb, 4) : hb, m4);
      sc[h] = _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_slli_epi16(_mm256_and_si256(hi, three), 4));
      mn[h] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), m4),
                              _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 2), three), 4));
    }
    __m256i isum[R], imin[R];
    TP_UNROLL for (int r = 0; r < R; ++r) isum[r] = imin[r] = _mm256_setzero_si256();
    TP_UNROLL for (int c = 0; c < 4; ++c) {
      const __m256i sc_lo = both_int16(table_row<false>(sc, 2 * c));
      const __m256i sc_hi = both_int16(table_row<false>(sc, 2 * c + 1));
      const __m256i mins = int16_pairs(table_row<false>(mn, 2 * c), table_row<false>(mn, 2 * c + 1));
      // Vector 2 k + h of each nibble: register 4 c + k's half h, activation dword 2 k + h
      // (low nibbles) or 8 + 2 k + h (high) of the chunk.
      __m256i ql[8], qh[8];
      TP_UNROLL for (int v = 0; v < 8; ++v) {
        const __m256i w = load256(codes + 64 * (4 * c + v / 2) + 32 * (v % 2));
        ql[v] = _mm256_and_si256(w, m4);
        qh[v] = _mm256_and_si256(_mm256_srli_epi16(w, 4), m4);
        if constexpr (T == DType::kQ5_K) {
          const __m256i sixteen = _mm256_set1_epi8(16);
          uint32_t b0, b1;
          std::memcpy(&b0, ex + 8 * (2 * (4 * c + v / 2)) + 4 * (v % 2), 4);
          std::memcpy(&b1, ex + 8 * (2 * (4 * c + v / 2) + 1) + 4 * (v % 2), 4);
          ql[v] = _mm256_add_epi8(ql[v], _mm256_and_si256(bytes_from_bits(b0), sixteen));
          qh[v] = _mm256_add_epi8(qh[v], _mm256_and_si256(bytes_from_bits(b1), sixteen));
        }
      }
      TP_UNROLL for (int r = 0; r < R; ++r) {
        const char* a = act + r * l.row_bytes;
        const char* x = a + s * kKQuantBlock + 64 * c;
        TP_UNROLL for (int v0 = 0; v0 < 8; v0 += kPerWiden) {
          __m256i lo = _mm256_maddubs_epi16(ql[v0], act_dword(x, v0));
          __m256i hi = _mm256_maddubs_epi16(qh[v0], act_dword(x, 8 + v0));
          TP_UNROLL for (int v = v0 + 1; v < v0 + kPerWiden; ++v) {
            lo = _mm256_add_epi16(lo, _mm256_maddubs_epi16(ql[v], act_dword(x, v)));
            hi = _mm256_add_epi16(hi, _mm256_maddubs_epi16(qh[v], act_dword(x, 8 + v)));
          }
          isum[r] = _mm256_add_epi32(
              isum[r], _mm256_add_epi32(_mm256_madd_epi16(lo, sc_lo), _mm256_madd_epi16(hi, sc_hi)));
        }
        const int32_t* s32 = reinterpret_cast<const int32_t*>(a + l.off_c) + s * 8;
        imin[r] = _mm256_add_epi32(imin[r], _mm256_madd_epi16(mins, pair_in_every_lane(s32[2 * c], s32[2 * c + 1])));
      }
    }
    const __m256 d = rows_f16(ex + offset_kd(T)), dmin = rows_f16(ex + offset_kdmin(T));
    TP_UNROLL for (int r = 0; r < R; ++r) {
      const __m256 dx = _mm256_set1_ps(reinterpret_cast<const float*>(act + r * l.row_bytes + l.off_a)[s]);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(d, dx), acc[r]);
      acc[r] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(imin[r]), _mm256_mul_ps(dmin, dx), acc[r]);
    }
  }
  TP_UNROLL for (int r = 0; r < R; ++r) _mm256_storeu_ps(res + r * kPackedRows, acc[r]);
}

// Q6_K: per half h, register k and q = 0..3, weights 128 h + 32 q + 8 k .. +7 (sub-block
// 8 h + 2 q + k / 2); codes q + 32, the -32 folded in once per super-block through the
// activations' 16-code sums.
template <int R>
TP_AVX2 void q6k_group(const char* group, int64_t nsb, const char* act, const ActLayout& l, float* res) {
  constexpr DType T = DType::kQ6_K;
  constexpr int64_t bb = block_bytes(T);
  const __m256i m4 = _mm256_set1_epi8(0x0f), m30 = _mm256_set1_epi8(0x30);
  __m256 acc[R];
  TP_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  for (int64_t s = 0; s < nsb; ++s) {
    const char* codes = group + s * bb;
    const char* ex = codes + code_bytes(T);
    prefetch_ahead<bb>(codes);
    const char* scales = ex + offset_kscales(T);  // byte 8 g + r, int8
    __m256i isum[R];
    TP_UNROLL for (int r = 0; r < R; ++r) isum[r] = _mm256_setzero_si256();
    // -32 x sum over sub-blocks g of scale x the activations' 16-code sum, two g per VPMADDWD.
    TP_UNROLL for (int g = 0; g < 16; g += 2) {
      const __m256i sc2 = int16_pairs(
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * g))),
          _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * g + 8))));
      TP_UNROLL for (int r = 0; r < R; ++r) {
        const int32_t* s16 = reinterpret_cast<const int32_t*>(act + r * l.row_bytes + l.off_d) + s * 16;
        isum[r] = _mm256_sub_epi32(isum[r], _mm256_slli_epi32(
                                                _mm256_madd_epi16(sc2, pair_in_every_lane(s16[g], s16[g + 1])), 5));
      }
    }
    // (h, kk) not unrolled: a whole super-block's code vectors at once spilled (GCC 12).
    for (int h = 0; h < 2; ++h) {
      for (int kk = 0; kk < 2; ++kk) {
        __m256i sc[4];  // sub-block 8 h + 2 q + kk's scale in both int16 halves of each row's lane
        TP_UNROLL for (int q = 0; q < 4; ++q)
          sc[q] = both_int16(_mm256_cvtepi8_epi32(
              _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales + 8 * (8 * h + 2 * q + kk)))));
        TP_UNROLL for (int kx = 0; kx < 2; ++kx) {
          // Register k = 2 kk + kx; its ql bytes give q = odd (low nibbles) and odd + 2 (high).
          const char* regs = codes + 192 * (4 * h + 2 * kk + kx);
          TP_UNROLL for (int odd = 0; odd < 2; ++odd) {
            __m256i c[2][2];  // [q / 2][half]
            TP_UNROLL for (int hh = 0; hh < 2; ++hh) {
              const __m256i lo = load256(regs + 64 * odd + 32 * hh), hb = load256(regs + 128 + 32 * hh);
              // Bits 2 q, 2 q + 1 of the qh bytes to bits 4, 5.
              const __m256i high_lo = odd ? _mm256_slli_epi16(hb, 2) : _mm256_slli_epi16(hb, 4);
              const __m256i high_hi = odd ? _mm256_srli_epi16(hb, 2) : hb;
              c[0][hh] = _mm256_or_si256(_mm256_and_si256(lo, m4), _mm256_and_si256(high_lo, m30));
              c[1][hh] =
                  _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), m4), _mm256_and_si256(high_hi, m30));
            }
            TP_UNROLL for (int r = 0; r < R; ++r) {
              const char* x = act + r * l.row_bytes + s * kKQuantBlock + 128 * h;
              const int dw = 8 * odd + 4 * kk + 2 * kx;  // the dword of half 0
              TP_UNROLL for (int qi = 0; qi < 2; ++qi) {
                // q = odd + 2 qi: chunk qi of the half. Pair sums below 2 x 63 x 127: the two
                // halves add in int16.
                const char* xc = x + 64 * qi;
                const __m256i s2 = _mm256_add_epi16(_mm256_maddubs_epi16(c[qi][0], act_dword(xc, dw)),
                                                    _mm256_maddubs_epi16(c[qi][1], act_dword(xc, dw + 1)));
                isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(s2, sc[odd + 2 * qi]));
              }
            }
          }
        }
      }
    }
    const __m256 d = rows_f16(ex + offset_kd(T));
    TP_UNROLL for (int r = 0; r < R; ++r) {
      const __m256 dx = _mm256_set1_ps(reinterpret_cast<const float*>(act + r * l.row_bytes + l.off_a)[s]);
      acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r]), _mm256_mul_ps(d, dx), acc[r]);
    }
  }
  TP_UNROLL for (int r = 0; r < R; ++r) _mm256_storeu_ps(res + r * kPackedRows, acc[r]);
}

struct Avx2Packed {
  static constexpr bool kKQuants = true;
  template <DType T, int R>
  static void group(const char* group, int64_t nb, const char* act, const ActLayout& l, float* res) {
    if constexpr (T == DType::kQ6_K) q6k_group<R>(group, nb, act, l, res);
    else if constexpr (dtype_is_kquant(T)) k4_group<T, R>(group, nb, act, l, res);
    else legacy_group<T, R>(group, nb, act, l, res);
  }
};

}  // namespace

void run_packed_avx2(const Operands& o, DType t) { PackedDriver<Avx2Packed>::run_type(o, t); }

}  // namespace tensorpar::int8_detail

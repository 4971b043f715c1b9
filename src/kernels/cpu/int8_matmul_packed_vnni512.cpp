// The int8-activation kernels for row-packed weights (int8_packed.h) on AVX-512 with VNNI.
//
// Per block of a group of 8 weight rows: the codes as four 64-code registers whose int32 lanes
// are (row, 4 weights) pairs, rows 0-7 in lanes 0-7 and again in 8-15 with the next 4 weights;
// per input row, four VPDPBUSD against the block's activations permuted into the same pairs
// (one 32-bit permute each), started from the block's offset term (-offset x the sum of its
// activation codes, split over a row's two lanes); the int32 lanes to f32, times the input's
// block scale, fused into the row's accumulator with the 8 rows' weight scales. A row's two lanes
// are added at the end. Every (weight row, input row) pair runs the same instructions in the same
// order whichever rows share the group or the call, so a row's result does not depend on the
// batch or the thread count.
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/cpu/int8_matmul_driver.h"
#include "kernels/cpu/int8_packed.h"
#include "kernels/cpu/unroll.h"

#define TP_VNNI __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")))

namespace tensorpar::int8_detail {

namespace {

using namespace int8_packed;

// The first of the two activation dwords (lanes 0-7, then 8-15 the next one) code register k
// multiplies: 4-bit types k = low nibbles of bytes 0-63 (elements 0-7), their high nibbles
// (16-23), low nibbles of bytes 64-127 (8-15), their high nibbles (24-31); Q8_0 bytes 64 k ...
template <DType T>
constexpr int act_dword(int k) {
  if constexpr (T == DType::kQ8_0) return 2 * k;
  else return k == 0 ? 0 : k == 1 ? 4 : k == 2 ? 2 : 6;
}

template <DType T>
constexpr bool has_offset_term() {
  return T == DType::kQ4_1 || T == DType::kQ5_1;
}

// The four code registers of block b of a group (codes: the group's codes region; extras: the
// block's extras).
template <DType T>
TP_VNNI inline void block_codes(const char* codes, const char* extras, __m512i (&q)[4]) {
  if constexpr (T == DType::kQ8_0) {
    TP_UNROLL for (int k = 0; k < 4; ++k) q[k] = _mm512_loadu_si512(codes + 64 * k);
  } else {
    const __m512i m4 = _mm512_set1_epi8(0x0f);
    const __m512i c0 = _mm512_loadu_si512(codes), c1 = _mm512_loadu_si512(codes + 64);
    q[0] = _mm512_and_si512(c0, m4);
    q[1] = _mm512_and_si512(_mm512_srli_epi16(c0, 4), m4);
    q[2] = _mm512_and_si512(c1, m4);
    q[3] = _mm512_and_si512(_mm512_srli_epi16(c1, 4), m4);
    if constexpr (T == DType::kQ5_0 || T == DType::kQ5_1) {
      const __m512i sixteen = _mm512_set1_epi8(16);
      TP_UNROLL for (int k = 0; k < 4; ++k) {
        uint64_t h;
        std::memcpy(&h, extras + offset_qh(T) + 8 * k, 8);
        q[k] = _mm512_mask_add_epi8(q[k], __mmask64(h), q[k], sixteen);
      }
    }
    if constexpr (T == DType::kIQ4_NL) {
      // The table's values + 128: unsigned codes with offset 128.
      const __m512i table = _mm512_xor_si512(
          _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))),
          _mm512_set1_epi8(char(0x80)));
      TP_UNROLL for (int k = 0; k < 4; ++k) q[k] = _mm512_shuffle_epi8(table, q[k]);
    }
  }
}

// res[r * 8 + i] = input row r of the layout . weight row i of the group, r < R, i < 8.
template <DType T, int R>
TP_VNNI void packed_group(const char* group, int64_t nb, const char* act, const ActLayout& l, float* res) {
  constexpr int64_t bb = block_bytes(T);
  constexpr int half_offset = legacy_offset(T) / 2;  // on each of a row's two lanes
  __m512i idx[4];
  TP_UNROLL for (int k = 0; k < 4; ++k) {
    const int d = act_dword<T>(k);
    idx[k] = _mm512_set_epi32(d + 1, d + 1, d + 1, d + 1, d + 1, d + 1, d + 1, d + 1, d, d, d, d, d, d, d, d);
  }
  __m512 acc[R];
  __m256 accm[R];
  TP_UNROLL for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), accm[r] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const char* codes = group + b * bb;
    const char* ex = codes + code_bytes(T);
    TP_UNROLL for (int64_t p = 0; p < bb; p += 64) _mm_prefetch(codes + kPrefetchBytes + p, _MM_HINT_T0);
    __m512i q[4];
    block_codes<T>(codes, ex, q);
    const __m512 dw = _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ex + kScaleOffset))));
    __m256 mw;
    if constexpr (has_offset_term<T>())
      mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(ex + offset_m(T))));
    TP_UNROLL for (int r = 0; r < R; ++r) {
      const char* a = act + r * l.row_bytes;
      const __m512i x = _mm512_castsi256_si512(_mm256_load_si256(reinterpret_cast<const __m256i*>(a + b * kQuantBlock)));
      __m512i dot = _mm512_set1_epi32(-half_offset * reinterpret_cast<const int32_t*>(a + l.off_d)[b]);
      TP_UNROLL for (int k = 0; k < 4; ++k) dot = _mm512_dpbusd_epi32(dot, q[k], _mm512_permutexvar_epi32(idx[k], x));
      const float dx = reinterpret_cast<const float*>(a + l.off_a)[b * 8];
      acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(dot), _mm512_set1_ps(dx)), dw, acc[r]);
      if constexpr (has_offset_term<T>())
        accm[r] = _mm256_fmadd_ps(mw, _mm256_set1_ps(reinterpret_cast<const float*>(a + l.off_c)[b]), accm[r]);
    }
  }
  TP_UNROLL for (int r = 0; r < R; ++r) {
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(acc[r]), _mm512_extractf32x8_ps(acc[r], 1));
    if constexpr (has_offset_term<T>()) s = _mm256_add_ps(s, accm[r]);
    _mm256_storeu_ps(res + r * kPackedRows, s);
  }
}

struct Vnni512Packed {
  static constexpr bool kKQuants = false;
  template <DType T, int R>
  static void group(const char* group, int64_t nb, const char* act, const ActLayout& l, float* res) {
    packed_group<T, R>(group, nb, act, l, res);
  }
};

}  // namespace

void run_packed_vnni512(const Operands& o, DType t) { PackedDriver<Vnni512Packed>::run_type(o, t); }

}  // namespace tensorpar::int8_detail

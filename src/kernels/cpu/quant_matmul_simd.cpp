// AVX2 and AVX-512 inner kernels of the quantized matmul: a fused dequant-dot of one quantized
// weight row against up to 4 f32 activation rows, and row dequantizers for the tiled path.
// Legacy blocks (32 weights) are unpacked in registers; K-quant super-blocks (256) are
// dequantized into a 1 KiB stack buffer first, which stays in L1.
// Each function carries a target attribute; quant_matmul.cpp calls them only after checking
// the CPU at run time, so the file builds for the baseline ISA.
// GCC 12 falsely flags the intrinsic headers' own undefined-vector idiom when they are used in
// target-attribute functions (its bug 105593); the warning is about the header, not our code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <cpuid.h>
#include <immintrin.h>

#include "core/quant.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "kernels/cpu/quant_unpack_avx512.h"
#include "kernels/cpu/target_isa.h"

namespace tensorpar::quant_detail {

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports does not know "f16c".
static bool cpu_has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
}
bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

namespace {

// ---- AVX-512: a block of 32 weights is two vectors of 16 lanes ----

// sum_j (q_j d + m) x_j = d * sum_j q_j x_j + m * sum_j x_j: the offset needs only the block
// sums of x, so the inner loop is the same for every format.
template <DType T, int R>
TP_AVX512 void dot512(const void* w, int64_t nb, const float* x, int64_t ldx, const float* xs,
                      int64_t ldxs, float* res) {
  __m512 acc[R];
  float macc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps(), macc[r] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    __m512 lo, hi;
    float d, m = 0.0f;
    unpack512<T>(w, b, lo, hi, d, m);
    const __m512 dv = _mm512_set1_ps(d);
    for (int r = 0; r < R; ++r) {
      const float* xr = x + r * ldx + b * 32;
      __m512 t = _mm512_mul_ps(lo, _mm512_loadu_ps(xr));
      t = _mm512_fmadd_ps(hi, _mm512_loadu_ps(xr + 16), t);
      acc[r] = _mm512_fmadd_ps(t, dv, acc[r]);
      if constexpr (quant_has_offset(T)) macc[r] += m * xs[r * ldxs + b];
    }
  }
  for (int r = 0; r < R; ++r) res[r] = _mm512_reduce_add_ps(acc[r]) + macc[r];
}

// K-quants: each super-block dequantized once, then multiplied with every row.
template <int R>
TP_AVX512 void dotk512(const void* w, DType t, int64_t nb, const float* x, int64_t ldx, float* res) {
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  alignas(64) float buf[kKQuantBlock];
  const int64_t bb = dtype_block_bytes(t);
  for (int64_t b = 0; b < nb; ++b) {
    dequant_kquant_avx512(buf, static_cast<const char*>(w) + b * bb, t, 1);
    for (int c = 0; c < kKQuantBlock; c += 16) {
      const __m512 wv = _mm512_load_ps(buf + c);
      for (int r = 0; r < R; ++r)
        acc[r] = _mm512_fmadd_ps(wv, _mm512_loadu_ps(x + r * ldx + b * kKQuantBlock + c), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) res[r] = _mm512_reduce_add_ps(acc[r]);
}

TP_AVX512 void dotk512_rows(const void* w, DType t, int64_t nb, const float* x, int64_t ldx, int rows, float* res) {
  switch (rows) {
    case 1: return dotk512<1>(w, t, nb, x, ldx, res);
    case 2: return dotk512<2>(w, t, nb, x, ldx, res);
    case 3: return dotk512<3>(w, t, nb, x, ldx, res);
    default: return dotk512<4>(w, t, nb, x, ldx, res);
  }
}

template <DType T>
TP_AVX512 void dot512_rows(const void* w, int64_t nb, const float* x, int64_t ldx, const float* xs,
                           int64_t ldxs, int rows, float* res) {
  switch (rows) {
    case 1: return dot512<T, 1>(w, nb, x, ldx, xs, ldxs, res);
    case 2: return dot512<T, 2>(w, nb, x, ldx, xs, ldxs, res);
    case 3: return dot512<T, 3>(w, nb, x, ldx, xs, ldxs, res);
    default: return dot512<T, 4>(w, nb, x, ldx, xs, ldxs, res);
  }
}

template <DType T>
TP_AVX512 void dequant512(float* out, const void* w, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    __m512 lo, hi;
    float d, m = 0.0f;
    unpack512<T>(w, b, lo, hi, d, m);
    const __m512 dv = _mm512_set1_ps(d), mv = _mm512_set1_ps(m);
    _mm512_storeu_ps(out + b * 32, _mm512_fmadd_ps(lo, dv, mv));
    _mm512_storeu_ps(out + b * 32 + 16, _mm512_fmadd_ps(hi, dv, mv));
  }
}

// f32 -> bf16 round to nearest even (weights are finite, so no NaN case).
TP_AVX512 inline __m256i to_bf16_512(__m512 v) {
  const __m512i u = _mm512_castps_si512(v);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
  const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
  return _mm512_cvtepi32_epi16(_mm512_srli_epi32(r, 16));
}

template <DType T>
TP_AVX512 void dequant512_bf16(bf16* out, const void* w, int64_t nb) {
  if constexpr (dtype_is_kquant(T)) {
    alignas(64) float buf[kKQuantBlock];
    for (int64_t b = 0; b < nb; ++b) {
      dequant_kquant_avx512(buf, static_cast<const char*>(w) + b * dtype_block_bytes(T), T, 1);
      for (int c = 0; c < kKQuantBlock; c += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * kKQuantBlock + c), to_bf16_512(_mm512_load_ps(buf + c)));
    }
  } else {
    for (int64_t b = 0; b < nb; ++b) {
      __m512 lo, hi;
      float d, m = 0.0f;
      unpack512<T>(w, b, lo, hi, d, m);
      const __m512 dv = _mm512_set1_ps(d), mv = _mm512_set1_ps(m);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * 32), to_bf16_512(_mm512_fmadd_ps(lo, dv, mv)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * 32 + 16), to_bf16_512(_mm512_fmadd_ps(hi, dv, mv)));
    }
  }
}

// ---- AVX2: a block of 32 weights is four vectors of 8 lanes ----

template <DType T>
TP_AVX2 inline void unpack256(const void* w, int64_t b, __m256 v[4], float& d, float& m) {
  const __m128i mask = _mm_set1_epi8(0x0f);
  __m128i l, h;  // elements 0..15 and 16..31 as bytes
  bool is_signed = true;
  if constexpr (T == DType::kQ8_0) {
    const auto* blk = static_cast<const BlockQ8_0*>(w) + b;
    l = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs + 16));
    d = _cvtsh_ss(blk->d.bits);
  } else if constexpr (T == DType::kQ4_0) {
    const auto* blk = static_cast<const BlockQ4_0*>(w) + b;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    const __m128i eight = _mm_set1_epi8(8);
    l = _mm_sub_epi8(_mm_and_si128(q, mask), eight);
    h = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), mask), eight);
    d = _cvtsh_ss(blk->d.bits);
  } else {
    const auto* blk = static_cast<const BlockQ4_1*>(w) + b;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    l = _mm_and_si128(q, mask);
    h = _mm_and_si128(_mm_srli_epi16(q, 4), mask);
    d = _cvtsh_ss(blk->d.bits);
    m = _cvtsh_ss(blk->m.bits);
    is_signed = false;
  }
  if (is_signed) {
    v[0] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(l));
    v[1] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(l, 8)));
    v[2] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(h));
    v[3] = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(h, 8)));
  } else {
    v[0] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(l));
    v[1] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(l, 8)));
    v[2] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(h));
    v[3] = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(h, 8)));
  }
}

TP_AVX2 inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

template <DType T, int R>
TP_AVX2 void dot256(const void* w, int64_t nb, const float* x, int64_t ldx, const float* xs,
                    int64_t ldxs, float* res) {
  __m256 acc[R];
  float macc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps(), macc[r] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    __m256 v[4];
    float d, m = 0.0f;
    unpack256<T>(w, b, v, d, m);
    const __m256 dv = _mm256_set1_ps(d);
    for (int r = 0; r < R; ++r) {
      const float* xr = x + r * ldx + b * 32;
      __m256 t = _mm256_mul_ps(v[0], _mm256_loadu_ps(xr));
      t = _mm256_fmadd_ps(v[1], _mm256_loadu_ps(xr + 8), t);
      t = _mm256_fmadd_ps(v[2], _mm256_loadu_ps(xr + 16), t);
      t = _mm256_fmadd_ps(v[3], _mm256_loadu_ps(xr + 24), t);
      acc[r] = _mm256_fmadd_ps(t, dv, acc[r]);
      if constexpr (T == DType::kQ4_1) macc[r] += m * xs[r * ldxs + b];
    }
  }
  for (int r = 0; r < R; ++r) res[r] = hsum256(acc[r]) + macc[r];
}

// The types without an AVX2 unpacker (q5_0, q5_1, iq4_nl, K-quants): each block dequantized by
// the scalar reference into a stack buffer, then an 8-lane dot with every row.
template <int R>
TP_AVX2 void dot256_generic(const void* w, DType t, int64_t nb, const float* x, int64_t ldx, float* res) {
  __m256 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_ps();
  alignas(32) float buf[kKQuantBlock];
  const int64_t be = dtype_block_elems(t), bb = dtype_block_bytes(t);
  for (int64_t b = 0; b < nb; ++b) {
    dequantize_row(buf, static_cast<const char*>(w) + b * bb, t, be);
    for (int64_t c = 0; c < be; c += 8) {
      const __m256 wv = _mm256_load_ps(buf + c);
      for (int r = 0; r < R; ++r) acc[r] = _mm256_fmadd_ps(wv, _mm256_loadu_ps(x + r * ldx + b * be + c), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) res[r] = hsum256(acc[r]);
}

template <DType T>
TP_AVX2 void dot256_rows(const void* w, int64_t nb, const float* x, int64_t ldx, const float* xs,
                         int64_t ldxs, int rows, float* res) {
  switch (rows) {
    case 1: return dot256<T, 1>(w, nb, x, ldx, xs, ldxs, res);
    case 2: return dot256<T, 2>(w, nb, x, ldx, xs, ldxs, res);
    case 3: return dot256<T, 3>(w, nb, x, ldx, xs, ldxs, res);
    default: return dot256<T, 4>(w, nb, x, ldx, xs, ldxs, res);
  }
}

}  // namespace

void dot_avx512(const void* w, DType t, int64_t nb, const float* x, int64_t ldx, const float* xsum,
                int64_t ldxs, int rows, float* res) {
  switch (t) {
    case DType::kQ8_0: return dot512_rows<DType::kQ8_0>(w, nb, x, ldx, xsum, ldxs, rows, res);
    case DType::kQ4_0: return dot512_rows<DType::kQ4_0>(w, nb, x, ldx, xsum, ldxs, rows, res);
    case DType::kQ4_1: return dot512_rows<DType::kQ4_1>(w, nb, x, ldx, xsum, ldxs, rows, res);
    case DType::kQ5_0: return dot512_rows<DType::kQ5_0>(w, nb, x, ldx, xsum, ldxs, rows, res);
    case DType::kQ5_1: return dot512_rows<DType::kQ5_1>(w, nb, x, ldx, xsum, ldxs, rows, res);
    case DType::kIQ4_NL: return dot512_rows<DType::kIQ4_NL>(w, nb, x, ldx, xsum, ldxs, rows, res);
    default: return dotk512_rows(w, t, nb, x, ldx, rows, res);
  }
}

void dot_avx2(const void* w, DType t, int64_t nb, const float* x, int64_t ldx, const float* xsum,
              int64_t ldxs, int rows, float* res) {
  switch (t) {
    case DType::kQ8_0: return dot256_rows<DType::kQ8_0>(w, nb, x, ldx, xsum, ldxs, rows, res);
    case DType::kQ4_0: return dot256_rows<DType::kQ4_0>(w, nb, x, ldx, xsum, ldxs, rows, res);
    case DType::kQ4_1: return dot256_rows<DType::kQ4_1>(w, nb, x, ldx, xsum, ldxs, rows, res);
    default:
      switch (rows) {
        case 1: return dot256_generic<1>(w, t, nb, x, ldx, res);
        case 2: return dot256_generic<2>(w, t, nb, x, ldx, res);
        case 3: return dot256_generic<3>(w, t, nb, x, ldx, res);
        default: return dot256_generic<4>(w, t, nb, x, ldx, res);
      }
  }
}

void dequant_f32_avx512(float* out, const void* w, DType t, int64_t nb) {
  switch (t) {
    case DType::kQ8_0: return dequant512<DType::kQ8_0>(out, w, nb);
    case DType::kQ4_0: return dequant512<DType::kQ4_0>(out, w, nb);
    case DType::kQ4_1: return dequant512<DType::kQ4_1>(out, w, nb);
    case DType::kQ5_0: return dequant512<DType::kQ5_0>(out, w, nb);
    case DType::kQ5_1: return dequant512<DType::kQ5_1>(out, w, nb);
    case DType::kIQ4_NL: return dequant512<DType::kIQ4_NL>(out, w, nb);
    default: return dequant_kquant_avx512(out, w, t, nb);
  }
}

void dequant_bf16_avx512(bf16* out, const void* w, DType t, int64_t nb) {
  switch (t) {
    case DType::kQ8_0: return dequant512_bf16<DType::kQ8_0>(out, w, nb);
    case DType::kQ4_0: return dequant512_bf16<DType::kQ4_0>(out, w, nb);
    case DType::kQ4_1: return dequant512_bf16<DType::kQ4_1>(out, w, nb);
    case DType::kQ5_0: return dequant512_bf16<DType::kQ5_0>(out, w, nb);
    case DType::kQ5_1: return dequant512_bf16<DType::kQ5_1>(out, w, nb);
    case DType::kIQ4_NL: return dequant512_bf16<DType::kIQ4_NL>(out, w, nb);
    case DType::kQ2_K: return dequant512_bf16<DType::kQ2_K>(out, w, nb);
    case DType::kQ3_K: return dequant512_bf16<DType::kQ3_K>(out, w, nb);
    case DType::kQ4_K: return dequant512_bf16<DType::kQ4_K>(out, w, nb);
    case DType::kQ5_K: return dequant512_bf16<DType::kQ5_K>(out, w, nb);
    default: return dequant512_bf16<DType::kQ6_K>(out, w, nb);
  }
}

}  // namespace tensorpar::quant_detail

// AVX2 and AVX-512 inner kernels of the quantized matmul: a fused dequant-dot of one quantized
// weight row against up to 4 f32 activation rows, and row dequantizers for the tiled path.
// Each function carries a target attribute; quant_matmul.cpp calls them only after checking
// the CPU at run time, so the file builds for the baseline ISA.
// GCC 12 falsely flags the intrinsic headers' own undefined-vector idiom when they are used in
// target-attribute functions (its bug 105593); the warning is about the header, not our code.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>

#include <cmath>

#include "core/quant.h"
#include "kernels/cpu/quant_matmul_kernels.h"

#define TP_AVX2 __attribute__((target("avx2,fma,f16c")))
#define TP_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

namespace tensorpar::quant_detail {

bool cpu_has_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}
bool cpu_has_avx512() {
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}

namespace {

// ---- AVX-512: a block of 32 weights is two vectors of 16 lanes ----

// Raw quant values of block b as floats (lo = elements 0..15, hi = 16..31), its scale d and
// offset m (q4_1 only; the others leave m = 0).
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
  } else {
    const auto* blk = static_cast<const BlockQ4_1*>(w) + b;
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk->qs));
    lo = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(q, mask)));
    hi = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), mask)));
    d = _cvtsh_ss(blk->d.bits);
    m = _cvtsh_ss(blk->m.bits);
  }
}

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
      if constexpr (T == DType::kQ4_1) macc[r] = std::fma(m, xs[r * ldxs + b], macc[r]);  // explicit: one rounding on every path
    }
  }
  for (int r = 0; r < R; ++r) res[r] = _mm512_reduce_add_ps(acc[r]) + macc[r];
}

template <DType T>
TP_AVX512 void dot512_rows(const void* w, int64_t nb, const float* x, int64_t ldx, const float* xs,
                           int64_t ldxs, int rows, float* res) {
  switch (rows) {
    case 1: return dot512<T, 1>(w, nb, x, ldx, xs, ldxs, res);
    case 2: return dot512<T, 2>(w, nb, x, ldx, xs, ldxs, res);
    case 3: return dot512<T, 3>(w, nb, x, ldx, xs, ldxs, res);
    case 4: return dot512<T, 4>(w, nb, x, ldx, xs, ldxs, res);
    case 5: return dot512<T, 5>(w, nb, x, ldx, xs, ldxs, res);
    case 6: return dot512<T, 6>(w, nb, x, ldx, xs, ldxs, res);
    case 7: return dot512<T, 7>(w, nb, x, ldx, xs, ldxs, res);
    default: return dot512<T, 8>(w, nb, x, ldx, xs, ldxs, res);
  }
}

// Many rows: WR weight rows, unpacked once (quant values as floats, d and m per block), against
// XR activation rows at a time, sharing each loaded x vector across the weight rows. Every
// (weight row, activation row) pair runs exactly dot512's operations in dot512's order, so the
// result is bitwise what the few-row path gives.
template <bool kOffset, int WR, int XR>
TP_AVX512 void tile512(const float* const* wq, const float* const* wd, const float* const* wm, int64_t nb,
                       const float* x, int64_t ldx, const float* xs, int64_t ldxs, float* res, int64_t ldres) {
  __m512 acc[WR][XR];
  float macc[WR][XR];
  for (int i = 0; i < WR; ++i)
    for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_setzero_ps(), macc[i][j] = 0.0f;
  for (int64_t b = 0; b < nb; ++b) {
    __m512 x0[XR], x1[XR];
    for (int j = 0; j < XR; ++j) {
      x0[j] = _mm512_loadu_ps(x + j * ldx + b * 32);
      x1[j] = _mm512_loadu_ps(x + j * ldx + b * 32 + 16);
    }
    for (int i = 0; i < WR; ++i) {
      const __m512 lo = _mm512_loadu_ps(wq[i] + b * 32), hi = _mm512_loadu_ps(wq[i] + b * 32 + 16);
      const __m512 dv = _mm512_set1_ps(wd[i][b]);
      for (int j = 0; j < XR; ++j) {
        __m512 t = _mm512_mul_ps(lo, x0[j]);
        t = _mm512_fmadd_ps(hi, x1[j], t);
        acc[i][j] = _mm512_fmadd_ps(t, dv, acc[i][j]);
        if constexpr (kOffset) macc[i][j] = std::fma(wm[i][b], xs[j * ldxs + b], macc[i][j]);
      }
    }
  }
  for (int i = 0; i < WR; ++i)
    for (int j = 0; j < XR; ++j) res[i * ldres + j] = _mm512_reduce_add_ps(acc[i][j]) + macc[i][j];
}

template <bool kOffset, int WR>
TP_AVX512 void tile512_rows(const float* const* wq, const float* const* wd, const float* const* wm, int64_t nb,
                            const float* x, int64_t ldx, const float* xs, int64_t ldxs, int rows, float* res,
                            int64_t ldres) {
  switch (rows) {
    case 1: return tile512<kOffset, WR, 1>(wq, wd, wm, nb, x, ldx, xs, ldxs, res, ldres);
    case 2: return tile512<kOffset, WR, 2>(wq, wd, wm, nb, x, ldx, xs, ldxs, res, ldres);
    case 3: return tile512<kOffset, WR, 3>(wq, wd, wm, nb, x, ldx, xs, ldxs, res, ldres);
    default: return tile512<kOffset, WR, 4>(wq, wd, wm, nb, x, ldx, xs, ldxs, res, ldres);
  }
}

template <DType T>
TP_AVX512 void unpack_row512(float* q, float* d, float* m, const void* w, int64_t nb) {
  for (int64_t b = 0; b < nb; ++b) {
    __m512 lo, hi;
    m[b] = 0.0f;
    unpack512<T>(w, b, lo, hi, d[b], m[b]);
    _mm512_storeu_ps(q + b * 32, lo);
    _mm512_storeu_ps(q + b * 32 + 16, hi);
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
  for (int64_t b = 0; b < nb; ++b) {
    __m512 lo, hi;
    float d, m = 0.0f;
    unpack512<T>(w, b, lo, hi, d, m);
    const __m512 dv = _mm512_set1_ps(d), mv = _mm512_set1_ps(m);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * 32), to_bf16_512(_mm512_fmadd_ps(lo, dv, mv)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + b * 32 + 16), to_bf16_512(_mm512_fmadd_ps(hi, dv, mv)));
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
      if constexpr (T == DType::kQ4_1) macc[r] = std::fma(m, xs[r * ldxs + b], macc[r]);  // explicit: one rounding on every path
    }
  }
  for (int r = 0; r < R; ++r) res[r] = hsum256(acc[r]) + macc[r];
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
    default: return dot512_rows<DType::kQ4_1>(w, nb, x, ldx, xsum, ldxs, rows, res);
  }
}

void dot_avx2(const void* w, DType t, int64_t nb, const float* x, int64_t ldx, const float* xsum,
              int64_t ldxs, int rows, float* res) {
  switch (t) {
    case DType::kQ8_0: return dot256_rows<DType::kQ8_0>(w, nb, x, ldx, xsum, ldxs, rows, res);
    case DType::kQ4_0: return dot256_rows<DType::kQ4_0>(w, nb, x, ldx, xsum, ldxs, rows, res);
    default: return dot256_rows<DType::kQ4_1>(w, nb, x, ldx, xsum, ldxs, rows, res);
  }
}

void unpack_row_avx512(float* q, float* d, float* m, const void* w, DType t, int64_t nb) {
  switch (t) {
    case DType::kQ8_0: return unpack_row512<DType::kQ8_0>(q, d, m, w, nb);
    case DType::kQ4_0: return unpack_row512<DType::kQ4_0>(q, d, m, w, nb);
    default: return unpack_row512<DType::kQ4_1>(q, d, m, w, nb);
  }
}

void tile_avx512(const float* const* wq, const float* const* wd, const float* const* wm, int wrows, bool offset,
                 int64_t nb, const float* x, int64_t ldx, const float* xs, int64_t ldxs, int rows, float* res,
                 int64_t ldres) {
  auto go = [&]<bool kOffset>() {
    switch (wrows) {
      case 1: return tile512_rows<kOffset, 1>(wq, wd, wm, nb, x, ldx, xs, ldxs, rows, res, ldres);
      case 2: return tile512_rows<kOffset, 2>(wq, wd, wm, nb, x, ldx, xs, ldxs, rows, res, ldres);
      case 3: return tile512_rows<kOffset, 3>(wq, wd, wm, nb, x, ldx, xs, ldxs, rows, res, ldres);
      default: return tile512_rows<kOffset, 4>(wq, wd, wm, nb, x, ldx, xs, ldxs, rows, res, ldres);
    }
  };
  if (offset)
    go.template operator()<true>();
  else
    go.template operator()<false>();
}

void dequant_f32_avx512(float* out, const void* w, DType t, int64_t nb) {
  switch (t) {
    case DType::kQ8_0: return dequant512<DType::kQ8_0>(out, w, nb);
    case DType::kQ4_0: return dequant512<DType::kQ4_0>(out, w, nb);
    default: return dequant512<DType::kQ4_1>(out, w, nb);
  }
}

void dequant_bf16_avx512(bf16* out, const void* w, DType t, int64_t nb) {
  switch (t) {
    case DType::kQ8_0: return dequant512_bf16<DType::kQ8_0>(out, w, nb);
    case DType::kQ4_0: return dequant512_bf16<DType::kQ4_0>(out, w, nb);
    default: return dequant512_bf16<DType::kQ4_1>(out, w, nb);
  }
}

}  // namespace tensorpar::quant_detail

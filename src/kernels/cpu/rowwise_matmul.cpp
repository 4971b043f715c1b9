// Batch-invariant matmul (see rowwise_matmul.h). Each dot product accumulates K in chunks of 16
// lanes (one accumulator vector per (weight row, input row) pair), then reduces the 16 lanes in a
// fixed tree; the register blocking (up to 4 weight rows x 4 input rows) only decides which dots
// run side by side, not how any one of them is summed.
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/cpu/rowwise_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/parallel_if.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "kernels/cpu/quant_unpack_avx512.h"
#include "kernels/cpu/stealing_schedule.h"
#include "kernels/cpu/target_isa.h"
#include "kernels/cpu/unroll.h"

namespace tensorpar {

namespace {

constexpr int kLanes = 16;
constexpr int kWRows = 4;  // weight rows per register block
constexpr int kXRows = 4;  // input rows per register block

struct Operands {
  const float* x;
  int64_t ldx;
  const void* w;
  int64_t ldw;  // elements between weight rows (bytes for block-quantized weights)
  DType wt;
  const float* bias;
  float* out;
  int64_t ldo;
  int64_t M, N, K;
};

Operands check(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  TP_CHECK(in.ndim() == 2 && in.dtype() == DType::kF32 && in.strides()[1] == 1, "[rowwise_matmul_forward] in: got ",
           in.describe(), ", expected f32 (M,K) with unit column stride");
  const DType wt = weight.dtype();
  const bool quant = dtype_is_quantized(wt);
  const int64_t be = dtype_block_elems(wt);
  TP_CHECK(weight.ndim() == 2 && (wt == DType::kF32 || wt == DType::kBF16 || wt == DType::kF16 || quant) &&
               weight.strides()[1] == 1 && weight.dim(1) == in.dim(1) &&
               (!quant || (weight.dim(1) % be == 0 && weight.strides()[0] % be == 0)),
           "[rowwise_matmul_forward] weight: got ", weight.describe(), ", expected f32/bf16/f16 or block-quantized (N,",
           in.dim(1), ") with unit column stride (whole blocks per row when quantized)");
  TP_CHECK(out.ndim() == 2 && out.dtype() == DType::kF32 && out.strides()[1] == 1 && out.dim(0) == in.dim(0) &&
               out.dim(1) == weight.dim(0),
           "[rowwise_matmul_forward] out: got ", out.describe(), ", expected f32 (", in.dim(0), ",", weight.dim(0),
           ")");
  TP_CHECK(!bias || (bias->ndim() == 1 && bias->dim(0) == weight.dim(0) && bias->dtype() == DType::kF32 &&
                     bias->is_contiguous()),
           "[rowwise_matmul_forward] bias: got ", bias ? bias->describe() : "", ", expected f32[", weight.dim(0), "]");
  const int64_t ldw = quant ? weight.strides()[0] / be * dtype_block_bytes(wt) : weight.strides()[0];
  return {in.data<float>(), in.strides()[0], weight.raw(), ldw, wt,
          bias ? bias->data<float>() : nullptr, out.data<float>(), out.strides()[0], in.dim(0), weight.dim(0),
          in.dim(1)};
}

// ---- portable: lane arrays the compiler may vectorize; the arithmetic order is the source's ----

inline float load_w(const void* w, DType t, int64_t i) {
  if (t == DType::kF32) return static_cast<const float*>(w)[i];
  if (t == DType::kBF16) return bf16_to_f32(static_cast<const bf16*>(w)[i]);
  return f16_to_f32(static_cast<const f16*>(w)[i]);
}

// The fixed lane reduction both paths share: pairwise halving 16 -> 8 -> 4 -> 2 -> 1.
inline float reduce16(float* a) {
  for (int width = kLanes / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) a[i] = a[i] + a[i + width];
  return a[0];
}

float dot_portable(const float* x, const void* w, DType t, int64_t K) {
  float acc[kLanes] = {};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = std::fma(load_w(w, t, k + l), x[k + l], acc[l]);
  for (int l = 0; k + l < K; ++l) acc[l] = std::fma(load_w(w, t, k + l), x[k + l], acc[l]);
  return reduce16(acc);
}

// ---- AVX-512 ----

template <DType W>
TP_AVX512 inline __m512 load_w16(const void* w, int64_t k) {
  if constexpr (W == DType::kF32) return _mm512_loadu_ps(static_cast<const float*>(w) + k);
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(w) + k));
  if constexpr (W == DType::kBF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

template <DType W>
TP_AVX512 inline __m512 load_w16_masked(const void* w, int64_t k, __mmask16 mask) {
  if constexpr (W == DType::kF32) return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + k);
  const __m256i h = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + k);
  if constexpr (W == DType::kBF16) return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  return _mm512_cvtph_ps(h);
}

// The 16 lanes summed in reduce16's tree (lanes i and i+8, then i and i+4, i+2, i+1), which is
// the order _mm512_reduce_add_ps uses: 256-bit halves, 128-bit halves, then within 128 bits.
TP_AVX512 inline float reduce512(__m512 v) { return _mm512_reduce_add_ps(v); }

// WR weight rows x XR input rows, every dot accumulating chunk after chunk of 16 lanes.
template <DType W, int WR, int XR>
TP_AVX512 void block512(const Operands& o, int64_t n0, int64_t m0) {
  __m512 acc[WR][XR];
  TP_UNROLL for (int i = 0; i < WR; ++i)
    TP_UNROLL for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_setzero_ps();
  const int64_t es = dtype_nbytes(W, 1);
  const char* wbase = static_cast<const char*>(o.w) + n0 * o.ldw * es;
  const float* xb = o.x + m0 * o.ldx;
  int64_t k = 0;
  for (; k + kLanes <= o.K; k += kLanes) {
    __m512 xv[XR];
    TP_UNROLL for (int j = 0; j < XR; ++j) xv[j] = _mm512_loadu_ps(xb + j * o.ldx + k);
    TP_UNROLL for (int i = 0; i < WR; ++i) {
      const __m512 wv = load_w16<W>(wbase + i * o.ldw * es, k);
      TP_UNROLL for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  if (k < o.K) {  // the tail: zero lanes add exact zeros
    const __mmask16 mask = __mmask16((1u << (o.K - k)) - 1);
    __m512 xv[XR];
    TP_UNROLL for (int j = 0; j < XR; ++j) xv[j] = _mm512_maskz_loadu_ps(mask, xb + j * o.ldx + k);
    TP_UNROLL for (int i = 0; i < WR; ++i) {
      const __m512 wv = load_w16_masked<W>(wbase + i * o.ldw * es, k, mask);
      TP_UNROLL for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_fmadd_ps(wv, xv[j], acc[i][j]);
    }
  }
  TP_UNROLL for (int i = 0; i < WR; ++i)
    TP_UNROLL for (int j = 0; j < XR; ++j) {
      const float b = o.bias ? o.bias[n0 + i] : 0.0f;
      o.out[(m0 + j) * o.ldo + n0 + i] = reduce512(acc[i][j]) + b;
    }
}

// Quantized weights dequantized in registers (w = q * d + m, one fma) for few input rows: the
// same chunk values and the same fma sequence as block512 over a dequantized buffer, so both
// give the same bits; this one skips the buffer when there are too few rows to reuse it.
template <DType T, int WR, int XR>
TP_AVX512 void qblock512(const Operands& o, int64_t n0, int64_t m0) {
  __m512 acc[WR][XR];
  TP_UNROLL for (int i = 0; i < WR; ++i)
    TP_UNROLL for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_setzero_ps();
  const char* wbase = static_cast<const char*>(o.w) + n0 * o.ldw;
  const float* xb = o.x + m0 * o.ldx;
  for (int64_t b = 0; b < o.K / kQuantBlock; ++b) {
    __m512 x0[XR], x1[XR];
    TP_UNROLL for (int j = 0; j < XR; ++j) {
      x0[j] = _mm512_loadu_ps(xb + j * o.ldx + b * kQuantBlock);
      x1[j] = _mm512_loadu_ps(xb + j * o.ldx + b * kQuantBlock + kLanes);
    }
    TP_UNROLL for (int i = 0; i < WR; ++i) {
      __m512 lo, hi;
      float d, m = 0.0f;
      quant_detail::unpack512<T>(wbase + i * o.ldw, b, lo, hi, d, m);
      const __m512 dv = _mm512_set1_ps(d), mv = _mm512_set1_ps(m);
      const __m512 wlo = _mm512_fmadd_ps(lo, dv, mv), whi = _mm512_fmadd_ps(hi, dv, mv);
      TP_UNROLL for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_fmadd_ps(wlo, x0[j], acc[i][j]);
      TP_UNROLL for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_fmadd_ps(whi, x1[j], acc[i][j]);
    }
  }
  TP_UNROLL for (int i = 0; i < WR; ++i)
    TP_UNROLL for (int j = 0; j < XR; ++j) {
      const float b = o.bias ? o.bias[n0 + i] : 0.0f;
      o.out[(m0 + j) * o.ldo + n0 + i] = reduce512(acc[i][j]) + b;
    }
}

// The register-block kernels as types, for the tile loops below.
template <DType W>
struct Float512 {
  template <int WR, int XR>
  TP_AVX512 static void run(const Operands& o, int64_t n0, int64_t m0) { block512<W, WR, XR>(o, n0, m0); }
};
template <DType T>
struct Quant512 {
  template <int WR, int XR>
  TP_AVX512 static void run(const Operands& o, int64_t n0, int64_t m0) { qblock512<T, WR, XR>(o, n0, m0); }
};

constexpr int64_t kWTile512 = 32;  // weight rows every input row passes before the next ones (L2)

// Weight rows [n0, n1) of a tile against XR input rows from m0. One input row (decode) takes 8
// weight rows at a time: 8 accumulators hide the fma latency.
template <class Kern, int XR>
TP_AVX512 void tile_rows512(const Operands& o, int64_t n0, int64_t n1, int64_t m0) {
  constexpr int kRows = XR == 1 ? 2 * kWRows : kWRows;
  int64_t n = n0;
  for (; n + kRows <= n1; n += kRows) Kern::template run<kRows, XR>(o, n, m0);
  if constexpr (kRows > kWRows)
    for (; n + kWRows <= n1; n += kWRows) Kern::template run<kWRows, XR>(o, n, m0);
  for (; n < n1; ++n) Kern::template run<1, XR>(o, n, m0);
}

// Weight rows [n0, n1) of a tile against every input row: each group of kXRows input rows (in
// L1) passes the whole tile (in L2) before the next group, so the inputs are read from memory
// once per tile, not once per block of weight rows.
template <class Kern>
TP_AVX512 void tile512(const Operands& o, int64_t n0, int64_t n1) {
  static_assert(kXRows == 4);
  int64_t m0 = 0;
  for (; m0 + kXRows <= o.M; m0 += kXRows) tile_rows512<Kern, kXRows>(o, n0, n1, m0);
  switch (o.M - m0) {
    case 3: tile_rows512<Kern, 3>(o, n0, n1, m0); break;
    case 2: tile_rows512<Kern, 2>(o, n0, n1, m0); break;
    case 1: tile_rows512<Kern, 1>(o, n0, n1, m0); break;
    default: break;
  }
}

// Rows at most this many multiply quantized weights dequantized in registers; more rows reuse a
// dequantized buffer (the dequantization then costs 1/M of the work).
constexpr int64_t kQuantInRegisterRows = 2;

// K-quant super-blocks always go through the buffer (their unpacking is too long for registers).
template <DType T>
TP_AVX512 void quant_tile(const Operands& o, int64_t n0, int64_t n1, std::vector<float>& deq) {
  if constexpr (!dtype_is_kquant(T)) {
    if (o.M <= kQuantInRegisterRows) return tile512<Quant512<T>>(o, n0, n1);
  }
  const int64_t nb = o.K / dtype_block_elems(T);
  for (int64_t n = n0; n < n1; ++n)
    quant_detail::dequant_f32_avx512(deq.data() + (n - n0) * o.K, static_cast<const char*>(o.w) + n * o.ldw, T, nb);
  Operands q = o;
  q.w = deq.data(), q.ldw = o.K, q.wt = DType::kF32;
  q.out = o.out + n0, q.bias = o.bias ? o.bias + n0 : nullptr;
  tile512<Float512<DType::kF32>>(q, 0, n1 - n0);
}

TP_AVX512 void run_avx512(const Operands& o) {
  const int64_t tiles = (o.N + kWTile512 - 1) / kWTile512;
  // The dequantized tile's buffer only where quant_tile uses it (not for 1-2 rows of a legacy type).
  const bool buffered = dtype_is_quantized(o.wt) && (dtype_is_kquant(o.wt) || o.M > kQuantInRegisterRows);
  // Each thread streams its own stretch of tiles; a late thread's tail is shared.
  const bool parallel = o.N * o.K * std::max<int64_t>(1, o.M) > (int64_t(1) << 16);
  StealingSchedule schedule(tiles, parallel);
  parallel_if(parallel, [&] {
    std::vector<float> deq(buffered ? size_t(kWTile512 * o.K) : 0);
    schedule.for_each([&](int64_t t) {
      const int64_t n0 = t * kWTile512, n1 = std::min(o.N, n0 + kWTile512);
      switch (o.wt) {
        case DType::kF32: tile512<Float512<DType::kF32>>(o, n0, n1); break;
        case DType::kBF16: tile512<Float512<DType::kBF16>>(o, n0, n1); break;
        case DType::kF16: tile512<Float512<DType::kF16>>(o, n0, n1); break;
        case DType::kQ8_0: quant_tile<DType::kQ8_0>(o, n0, n1, deq); break;
        case DType::kQ4_0: quant_tile<DType::kQ4_0>(o, n0, n1, deq); break;
        case DType::kQ4_1: quant_tile<DType::kQ4_1>(o, n0, n1, deq); break;
        case DType::kQ5_0: quant_tile<DType::kQ5_0>(o, n0, n1, deq); break;
        case DType::kQ5_1: quant_tile<DType::kQ5_1>(o, n0, n1, deq); break;
        case DType::kIQ4_NL: quant_tile<DType::kIQ4_NL>(o, n0, n1, deq); break;
        case DType::kQ2_K: quant_tile<DType::kQ2_K>(o, n0, n1, deq); break;
        case DType::kQ3_K: quant_tile<DType::kQ3_K>(o, n0, n1, deq); break;
        case DType::kQ4_K: quant_tile<DType::kQ4_K>(o, n0, n1, deq); break;
        case DType::kQ5_K: quant_tile<DType::kQ5_K>(o, n0, n1, deq); break;
        default: quant_tile<DType::kQ6_K>(o, n0, n1, deq); break;
      }
    });
  });
}

// ---- AVX2 with FMA and F16C: each dot's 16 lanes as two 8-lane halves, the fma sequence and the
// reduction tree of dot_portable, so the results are bitwise the portable loop's ----

constexpr int kWRows2 = 2;       // weight rows per register block (2 x 3 pairs x 2 halves: 12 accumulators)
constexpr int kXRows2 = 3;       // input rows per register block
constexpr int64_t kWTile2 = 32;  // weight rows every input row passes before the next ones (L2)

template <DType W>
TP_AVX2 inline __m256 load_w8(const void* w, int64_t k) {
  if constexpr (W == DType::kF32) return _mm256_loadu_ps(static_cast<const float*>(w) + k);
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(w) + k));
  if constexpr (W == DType::kBF16) return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  return _mm256_cvtph_ps(h);
}

// reduce16's tree: lanes i and i+8 (the halves), then i and i+4, i+2, i+1.
TP_AVX2 inline float reduce_halves(__m256 lo, __m256 hi) {
  const __m256 s = _mm256_add_ps(lo, hi);
  const __m128 q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
  return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

// One chunk of 16 lanes of every (weight row, input row) pair.
template <DType W, int WR, int XR>
TP_AVX2 inline void fma16(__m256 (&lo)[WR][XR], __m256 (&hi)[WR][XR], const float* const* xr, const char* const* wr,
                          int64_t k) {
  __m256 xl[XR], xh[XR];
  for (int j = 0; j < XR; ++j) xl[j] = _mm256_loadu_ps(xr[j] + k), xh[j] = _mm256_loadu_ps(xr[j] + k + 8);
  for (int i = 0; i < WR; ++i) {
    const __m256 wl = load_w8<W>(wr[i], k), wh = load_w8<W>(wr[i], k + 8);
    for (int j = 0; j < XR; ++j) {
      lo[i][j] = _mm256_fmadd_ps(wl, xl[j], lo[i][j]);
      hi[i][j] = _mm256_fmadd_ps(wh, xh[j], hi[i][j]);
    }
  }
}

// WR weight rows x XR input rows. The tail's missing lanes are zeros in both operands: a lane
// that started at +0 adds exact zeros, as the portable loop's untouched lanes do.
template <DType W, int WR, int XR>
TP_AVX2 void block256(const Operands& o, int64_t n0, int64_t m0) {
  __m256 lo[WR][XR], hi[WR][XR];
  for (int i = 0; i < WR; ++i)
    for (int j = 0; j < XR; ++j) lo[i][j] = _mm256_setzero_ps(), hi[i][j] = _mm256_setzero_ps();
  const int64_t es = dtype_nbytes(W, 1);
  const char* wbase = static_cast<const char*>(o.w) + n0 * o.ldw * es;
  const float* xb = o.x + m0 * o.ldx;
  const float* xr[XR];
  const char* wr[WR];
  for (int j = 0; j < XR; ++j) xr[j] = xb + j * o.ldx;
  for (int i = 0; i < WR; ++i) wr[i] = wbase + i * o.ldw * es;
  int64_t k = 0;
  for (; k + kLanes <= o.K; k += kLanes) fma16<W, WR, XR>(lo, hi, xr, wr, k);
  if (k < o.K) {
    const int64_t n = o.K - k;
    alignas(32) float xt[XR][kLanes] = {};
    alignas(32) char wt[WR][kLanes * 4] = {};
    const float* xp[XR];
    const char* wp[WR];
    for (int j = 0; j < XR; ++j) std::memcpy(xt[j], xr[j] + k, size_t(n) * 4), xp[j] = xt[j];
    for (int i = 0; i < WR; ++i) std::memcpy(wt[i], wr[i] + k * es, size_t(n * es)), wp[i] = wt[i];
    fma16<W, WR, XR>(lo, hi, xp, wp, 0);
  }
  for (int i = 0; i < WR; ++i)
    for (int j = 0; j < XR; ++j) {
      const float b = o.bias ? o.bias[n0 + i] : 0.0f;
      o.out[(m0 + j) * o.ldo + n0 + i] = reduce_halves(lo[i][j], hi[i][j]) + b;
    }
}

// Weight rows [n0, n1) of a tile against XR input rows from m0.
// One input row (decode) takes 4 weight rows at a time: 8 accumulators hide the fma latency.
template <DType W, int XR>
TP_AVX2 void tile_rows256(const Operands& o, int64_t n0, int64_t n1, int64_t m0) {
  constexpr int kRows = XR == 1 ? 4 : kWRows2;
  int64_t n = n0;
  for (; n + kRows <= n1; n += kRows) block256<W, kRows, XR>(o, n, m0);
  for (; n < n1; ++n) block256<W, 1, XR>(o, n, m0);
}

// Weight rows [n0, n1) of a tile against every input row: each group of kXRows2 input rows
// (in L1) passes the whole tile (in L2) before the next group, so the inputs are read from
// memory once per tile, not once per pair of weight rows.
template <DType W>
TP_AVX2 void tile256(const Operands& o, int64_t n0, int64_t n1) {
  static_assert(kXRows2 == 3);
  int64_t m0 = 0;
  for (; m0 + kXRows2 <= o.M; m0 += kXRows2) tile_rows256<W, kXRows2>(o, n0, n1, m0);
  if (o.M - m0 == 2) tile_rows256<W, 2>(o, n0, n1, m0);
  else if (o.M - m0 == 1) tile_rows256<W, 1>(o, n0, n1, m0);
}

TP_AVX2 void run_avx2(const Operands& o) {
  const int64_t tiles = (o.N + kWTile2 - 1) / kWTile2;
  const bool quant = dtype_is_quantized(o.wt);
  const bool parallel = o.N * o.K * std::max<int64_t>(1, o.M) > (int64_t(1) << 16);
  StealingSchedule schedule(tiles, parallel);
  parallel_if(parallel, [&] {
    // Quantized weights: the tile's rows dequantized by dequantize_row (the portable loop's values).
    std::vector<float> deq(quant ? size_t(kWTile2 * o.K) : 0);
    schedule.for_each([&](int64_t t) {
      const int64_t n0 = t * kWTile2, n1 = std::min(o.N, n0 + kWTile2);
      switch (o.wt) {
        case DType::kF32: tile256<DType::kF32>(o, n0, n1); break;
        case DType::kBF16: tile256<DType::kBF16>(o, n0, n1); break;
        case DType::kF16: tile256<DType::kF16>(o, n0, n1); break;
        default: {
          for (int64_t n = n0; n < n1; ++n)
            dequantize_row(deq.data() + (n - n0) * o.K, static_cast<const char*>(o.w) + n * o.ldw, o.wt, o.K);
          Operands q = o;
          q.w = deq.data(), q.ldw = o.K, q.wt = DType::kF32;
          q.out = o.out + n0, q.bias = o.bias ? o.bias + n0 : nullptr;
          tile256<DType::kF32>(q, 0, n1 - n0);
        }
      }
    });
  });
}

// With FMA on AVX2 machines (TP_VECTOR_CLONES: std::fma would otherwise be a libm call per
// element); each machine runs one clone, so results stay batch-invariant on it.
TP_VECTOR_CLONES void run_portable(const Operands& o) {
  const bool quant = dtype_is_quantized(o.wt);
  const int64_t row_bytes = quant ? o.ldw : o.ldw * dtype_nbytes(o.wt, 1);
#pragma omp parallel if (o.N * o.K * std::max<int64_t>(1, o.M) > (int64_t(1) << 16))
  {
    std::vector<float> deq(quant ? size_t(o.K) : 0);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < o.N; ++n) {
      const void* wrow = static_cast<const char*>(o.w) + n * row_bytes;
      DType t = o.wt;
      if (quant) {  // the whole row as f32 weights, then the float dot
        dequantize_row(deq.data(), wrow, o.wt, o.K);
        wrow = deq.data(), t = DType::kF32;
      }
      const float b = o.bias ? o.bias[n] : 0.0f;
      for (int64_t m = 0; m < o.M; ++m) o.out[m * o.ldo + n] = dot_portable(o.x + m * o.ldx, wrow, t, o.K) + b;
    }
  }
}

}  // namespace

void rowwise_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  const Operands o = check(out, in, weight, bias);
  if (o.M == 0 || o.N == 0) return;
  if (quant_detail::cpu_has_avx512())
    run_avx512(o);
  else if (quant_detail::cpu_has_avx2())
    run_avx2(o);
  else
    run_portable(o);
}

void rowwise_matmul_forward_portable(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  const Operands o = check(out, in, weight, bias);
  if (o.M == 0 || o.N == 0) return;
  run_portable(o);
}

}  // namespace tensorpar

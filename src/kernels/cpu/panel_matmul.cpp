// 16-bit weights in K-major panels (layout and arithmetic order in panel_matmul.h).
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/cpu/panel_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "kernels/cpu/unroll.h"

namespace tensorpar {

namespace {

constexpr int64_t kP = kPanelRows;  // output rows per group (64)
constexpr int64_t kQuarter = 16;    // rows one 256-bit load holds
// k values per pass over a group: 128 x 128 bytes = 16 KB of weights stay in L1 while every input
// row of the work item passes them.
constexpr int64_t kKBlock = 128;
// Input rows per work item (a multiple of the 6-row register block): its accumulators (96 x 64
// floats, 24 KB) live in a stack tile between the passes over K.
constexpr int64_t kItemRows = 96;

// Where row j (0..63) of a group sits among the 64 values of one k.
constexpr int64_t panel_pos(DType t, int64_t j) {
  if (t == DType::kF16 || t == DType::kF16x64) return j;
  const int64_t q = j / kQuarter, i = j % kQuarter;
  return q * kQuarter + (i % 8) * 2 + i / 8;
}

float widen(DType t, uint16_t v) {
  return t == DType::kBF16 ? bf16_to_f32(bf16{v}) : f16_to_f32(f16{v});
}

const uint16_t* bits(const Tensor& t) {
  return static_cast<const uint16_t*>(t.raw());
}

#define TP_AVX2 __attribute__((target("avx2,fma,f16c")))

// The next pass's weights, prefetched a cache line per k by whichever blocks run until all are
// requested: a pass of one quarter reads every other line of the group, which the hardware
// prefetcher follows poorly, and with few rows the memory would otherwise idle while the later
// quarters and row blocks compute on lines already in L1.
struct Prefetch {
  const char* next;
  const char* end;
};

// One quarter's 16 weights of one k as two vectors of 8 floats, rows 0..7 and 8..15.
template <DType T>
TP_AVX2 inline void widen_quarter(const uint16_t* w, __m256i high, __m256& lo, __m256& hi) {
  if constexpr (T == DType::kBF16) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    hi = _mm256_castsi256_ps(_mm256_and_si256(v, high));
  } else {
    (void)high;
    lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w)));
    hi = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + 8)));
  }
}

// R input rows x NQ quarters (16 rows each) of one group, over kn values of k. w: the group's
// first quarter taken at this pass's first k (row stride kP values); x: the first input row at
// this pass's first k; acc: the item's accumulator tile at the first row and quarter (row
// stride kP), read back unless `first` (the chain starts at +0). Each accumulator lane is one
// output's chain: one fma per k, in k order.
template <DType T, int NQ, int R>
TP_AVX2 void panel_block(const uint16_t* w, const float* x, int64_t ldx, float* acc, int64_t kn,
                         bool first, Prefetch& pf) {
  __m256 a[R][NQ][2];
  TP_UNROLL for (int r = 0; r < R; ++r) TP_UNROLL for (int q = 0; q < NQ; ++q)
      TP_UNROLL for (int h = 0; h < 2; ++h) a[r][q][h] =
          first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + r * kP + q * kQuarter + h * 8);
  const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  for (int64_t k = 0; k < kn; ++k) {
    if (pf.next < pf.end) {
      _mm_prefetch(pf.next, _MM_HINT_T0);
      pf.next += 64;
    }
    // Quarter by quarter, so that only its two widened vectors are live beside the accumulators
    // (2 NQ R + 3 registers with the mask: at most 16).
    TP_UNROLL for (int q = 0; q < NQ; ++q) {
      __m256 lo, hi;  // rows 16 q + 0..7, 16 q + 8..15
      widen_quarter<T>(w + k * kP + q * kQuarter, high, lo, hi);
      TP_UNROLL for (int r = 0; r < R; ++r) {
        const __m256 xb = _mm256_broadcast_ss(x + r * ldx + k);
        a[r][q][0] = _mm256_fmadd_ps(lo, xb, a[r][q][0]);
        a[r][q][1] = _mm256_fmadd_ps(hi, xb, a[r][q][1]);
      }
    }
  }
  TP_UNROLL for (int r = 0; r < R; ++r) TP_UNROLL for (int q = 0; q < NQ; ++q)
      TP_UNROLL for (int h = 0; h < 2; ++h)
          _mm256_storeu_ps(acc + r * kP + q * kQuarter + h * 8, a[r][q][h]);
}

// Every quarter of the group for R rows, in blocks of NQ quarters: 4 x 1 (8 accumulators hide
// the fma latency for one row), 2 x 2, or one quarter for 4-6 rows (up to 12 accumulators). Three
// rows run as two and one: 2 x 3 would need 17 registers (GCC keeps the 3 broadcasts for both
// quarters, and spilled an accumulator to the stack: a store and reload in its chain every k).
template <DType T, int R>
TP_AVX2 void panel_rows(const uint16_t* w, const float* x, int64_t ldx, float* acc, int64_t kn,
                        bool first, Prefetch& pf) {
  static_assert(R != 3, "three rows run as two and one");
  constexpr int NQ = R == 1 ? 4 : R == 2 ? 2 : 1;
  TP_UNROLL for (int q = 0; q < int(kP / kQuarter); q += NQ)
      panel_block<T, NQ, R>(w + q * kQuarter, x, ldx, acc + q * kQuarter, kn, first, pf);
}

struct Operands {
  const float* x;
  int64_t ldx;
  const uint16_t* w;
  const uint16_t* w_end;  // the last group's end
  bool bf16;              // else f16
  const float* bias;
  float* out;
  int64_t ldo;
  int64_t M, N, K;
};

// Rows [m0, m1) (at most kItemRows) against group g: pass after pass over K, every row of the
// item through each pass, then the item's outputs written with the bias added.
template <DType T>
TP_AVX2 void run_item(const Operands& o, int64_t g, int64_t m0, int64_t m1) {
  alignas(32) float acc[kItemRows * kP];
  const uint16_t* wg = o.w + g * kP * o.K;
  for (int64_t k0 = 0; k0 < o.K; k0 += kKBlock) {
    const int64_t kn = std::min(kKBlock, o.K - k0);
    const uint16_t* w = wg + k0 * kP;
    const bool first = k0 == 0;
    // The next pass (past the group's end: the next group's start, which this thread's next item
    // usually is), within the weights.
    const char* next = reinterpret_cast<const char*>(w + kn * kP);
    Prefetch pf{next,
                next + std::min(kKBlock * kP, o.w_end - (w + kn * kP)) * int64_t(sizeof(uint16_t))};
    int64_t m = m0;
    for (; m + 6 <= m1; m += 6)
      panel_rows<T, 6>(w, o.x + m * o.ldx + k0, o.ldx, acc + (m - m0) * kP, kn, first, pf);
    const float* x = o.x + m * o.ldx + k0;
    float* a = acc + (m - m0) * kP;
    switch (m1 - m) {
      case 5:
        panel_rows<T, 5>(w, x, o.ldx, a, kn, first, pf);
        break;
      case 4:
        panel_rows<T, 4>(w, x, o.ldx, a, kn, first, pf);
        break;
      case 3:
        panel_rows<T, 2>(w, x, o.ldx, a, kn, first, pf);
        panel_rows<T, 1>(w, x + 2 * o.ldx, o.ldx, a + 2 * kP, kn, first, pf);
        break;
      case 2:
        panel_rows<T, 2>(w, x, o.ldx, a, kn, first, pf);
        break;
      case 1:
        panel_rows<T, 1>(w, x, o.ldx, a, kn, first, pf);
        break;
      default:
        break;
    }
  }
  const int64_t n0 = g * kP, cols = std::min(kP, o.N - n0);
  for (int64_t m = m0; m < m1; ++m) {
    const float* a = acc + (m - m0) * kP;
    float* out = o.out + m * o.ldo + n0;
    for (int64_t j = 0; j < cols; ++j) out[j] = a[j] + (o.bias ? o.bias[n0 + j] : 0.0f);
  }
}

TP_AVX2 void run_avx2(const Operands& o) {
  const int64_t groups = (o.N + kP - 1) / kP, chunks = (o.M + kItemRows - 1) / kItemRows;
  // Consecutive items share a group, so a group's weights serve every row chunk while in cache.
#pragma omp parallel for schedule(static) if (o.N * o.K * o.M > (int64_t(1) << 16))
  for (int64_t item = 0; item < groups * chunks; ++item) {
    const int64_t g = item / chunks, m0 = item % chunks * kItemRows;
    const int64_t m1 = std::min(o.M, m0 + kItemRows);
    if (o.bf16)
      run_item<DType::kBF16>(o, g, m0, m1);
    else
      run_item<DType::kF16>(o, g, m0, m1);
  }
}

void check_packed(const Tensor& p, const char* where) {
  TP_CHECK(dtype_is_panels(p.dtype()) && p.ndim() == 2 && p.strides()[1] == 1 &&
               p.strides()[0] == p.dim(1),
           "[", where, "] got ", p.describe(),
           ", expected a bf16x64 or f16x64 (panel-packed) tensor");
}

// packed: the weight in panels (else plain bf16 or f16, the oracle's).
void check_operands(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                    bool packed, const char* where) {
  TP_CHECK(in.ndim() == 2 && in.dtype() == DType::kF32 && in.strides()[1] == 1, "[", where,
           "] in: got ", in.describe(), ", expected f32 (M,K) with unit column stride");
  const DType wt = weight.dtype();
  TP_CHECK(weight.ndim() == 2 &&
               (packed ? dtype_is_panels(wt) : wt == DType::kBF16 || wt == DType::kF16) &&
               weight.strides()[1] == 1 && weight.dim(1) == in.dim(1),
           "[", where, "] weight: got ", weight.describe(), ", expected ",
           packed ? "bf16x64 or f16x64" : "bf16 or f16", " (N,", in.dim(1),
           ") with unit column stride");
  TP_CHECK(out.ndim() == 2 && out.dtype() == DType::kF32 && out.strides()[1] == 1 &&
               out.dim(0) == in.dim(0) && out.dim(1) == weight.dim(0),
           "[", where, "] out: got ", out.describe(), ", expected f32 (", in.dim(0), ",",
           weight.dim(0), ")");
  TP_CHECK(!bias || (bias->ndim() == 1 && bias->dim(0) == weight.dim(0) &&
                     bias->dtype() == DType::kF32 && bias->is_contiguous()),
           "[", where, "] bias: got ", bias ? bias->describe() : "", ", expected f32[",
           weight.dim(0), "]");
}

}  // namespace

bool panels_usable() {
  return quant_detail::cpu_has_avx2();
}

Tensor pack_panels(const Tensor& w) {
  const DType t = w.dtype();
  TP_CHECK((t == DType::kBF16 || t == DType::kF16) && w.ndim() == 2 && w.strides()[1] == 1,
           "[pack_panels] got ", w.describe(),
           ", expected a 2-D bf16 or f16 tensor with unit column stride");
  const int64_t N = w.dim(0), K = w.dim(1), ldw = w.strides()[0], groups = (N + kP - 1) / kP;
  Tensor p = Tensor::zeros({groups * kP, K}, t == DType::kBF16 ? DType::kBF16x64 : DType::kF16x64);
  const uint16_t* src = bits(w);
  uint16_t* dst = static_cast<uint16_t*>(p.raw());
#pragma omp parallel for schedule(static) if (N * K > (int64_t(1) << 20))
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < kP && g * kP + j < N; ++j) {
      const uint16_t* row = src + (g * kP + j) * ldw;
      uint16_t* col = dst + g * kP * K + panel_pos(t, j);
      for (int64_t k = 0; k < K; ++k) col[k * kP] = row[k];
    }
  return p.slice(0, 0, N);
}

Tensor unpack_panels(const Tensor& packed) {
  check_packed(packed, "unpack_panels");
  const int64_t N = packed.dim(0), K = packed.dim(1);
  const DType t = dtype_unpacked(packed.dtype());
  Tensor w = Tensor::empty({N, K}, t);
  const uint16_t* src = bits(packed);
  uint16_t* dst = static_cast<uint16_t*>(w.raw());
#pragma omp parallel for schedule(static) if (N * K > (int64_t(1) << 20))
  for (int64_t r = 0; r < N; ++r) {
    const uint16_t* col = src + r / kP * kP * K + panel_pos(t, r % kP);
    for (int64_t k = 0; k < K; ++k) dst[r * K + k] = col[k * kP];
  }
  return w;
}

void panel_row_f32(const Tensor& packed, int64_t r, float* dst) {
  check_packed(packed, "panel_row_f32");
  TP_CHECK(r >= 0 && r < packed.dim(0), "[panel_row_f32] row ", r, " of ", packed.describe());
  const int64_t K = packed.dim(1);
  const DType t = dtype_unpacked(packed.dtype());
  const uint16_t* col = bits(packed) + r / kP * kP * K + panel_pos(t, r % kP);
  for (int64_t k = 0; k < K; ++k) dst[k] = widen(t, col[k * kP]);
}

void panel_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  const char* where = "panel_matmul_forward";
  check_operands(out, in, weight, bias, true, where);
  check_packed(weight, where);
  TP_CHECK(panels_usable(), "[", where, "] this CPU lacks AVX2, FMA or F16C");
  const int64_t M = in.dim(0), N = weight.dim(0), K = in.dim(1);
  const Operands o{in.data<float>(),
                   in.strides()[0],
                   bits(weight),
                   bits(weight) + (N + kP - 1) / kP * kP * K,
                   weight.dtype() == DType::kBF16x64,
                   bias ? bias->data<float>() : nullptr,
                   out.data<float>(),
                   out.strides()[0],
                   M,
                   N,
                   K};
  if (o.M == 0 || o.N == 0) return;
  if (o.K == 0) {  // no products: every chain is its starting +0
    for (int64_t m = 0; m < o.M; ++m)
      for (int64_t n = 0; n < o.N; ++n) o.out[m * o.ldo + n] = 0.0f + (o.bias ? o.bias[n] : 0.0f);
    return;
  }
  run_avx2(o);
}

void panel_matmul_reference(Tensor& out, const Tensor& in, const Tensor& weight,
                            const Tensor* bias) {
  check_operands(out, in, weight, bias, false, "panel_matmul_reference");
  const int64_t M = in.dim(0), N = weight.dim(0), K = in.dim(1);
  const DType t = weight.dtype();
  const uint16_t* w = bits(weight);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = in.data<float>() + m * in.strides()[0];
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        acc = std::fma(widen(t, w[n * weight.strides()[0] + k]), x[k], acc);
      out.data<float>()[m * out.strides()[0] + n] = acc + (bias ? bias->data<float>()[n] : 0.0f);
    }
}

}  // namespace tensorpar

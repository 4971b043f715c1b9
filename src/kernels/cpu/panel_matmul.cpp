// 16-bit weights in K-major panels (layout and arithmetic order in panel_matmul.h).
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/cpu/panel_matmul.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/parallel_if.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "kernels/cpu/stealing_schedule.h"
#include "kernels/cpu/target_isa.h"
#include "kernels/cpu/unroll.h"

namespace tensorpar {

namespace {

constexpr int64_t kP = kPanelRows;  // output rows per group (64)
constexpr int64_t kQuarter = 16;    // rows one quarter holds (one 256-bit load of 16-bit values)
// Bytes of one group's weights a pass keeps in L1 while every input row of the work item passes
// them: 128 values of k for 16-bit weights, 64 for f32.
constexpr int64_t kPassBytes = 16 << 10;
// Input rows per work item (a multiple of the 6-row register block): its accumulators (96 x 64
// floats, 24 KB) live in a stack tile between the passes over K.
constexpr int64_t kItemRows = 96;

constexpr int64_t elem_bytes(DType t) { return dtype_block_bytes(t); }

// Where row j (0..63) of a group sits among the 64 values of one k.
constexpr int64_t panel_pos(DType t, int64_t j) {
  if (dtype_unpacked(t) != DType::kBF16) return j;
  const int64_t q = j / kQuarter, i = j % kQuarter;
  return q * kQuarter + (i % 8) * 2 + i / 8;
}

// Value i of a plain or panel-packed f32 / bf16 / f16 array, widened.
float widen(DType t, const void* p, int64_t i) {
  switch (dtype_unpacked(t)) {
    case DType::kF32:
      return static_cast<const float*>(p)[i];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const bf16*>(p)[i]);
    default:
      return f16_to_f32(static_cast<const f16*>(p)[i]);
  }
}

// The next pass's weights, prefetched while this pass computes: each register block of the pass
// requests its share of the lines (`per_block`), spread over its k steps, so that the requests
// spread over the whole pass (with many rows, one line per step would request them all during
// the first blocks and leave the memory idle after). At most one line a step: with one or two
// rows a block has fewer steps than its share, and requesting it all (two lines a step with one
// row) made decode slower than leaving the rest to the hardware prefetcher, which follows the
// contiguous stream of those blocks. A pass of one quarter (4 rows and more) reads every other
// line of the group, which the hardware prefetcher follows poorly.
struct Prefetch {
  const char* next;
  const char* end;
  int64_t per_block;  // lines each block requests
};

// One quarter's 16 weights of one k as two vectors of 8 floats, rows 0..7 and 8..15.
template <DType T>
TP_AVX2 inline void widen_quarter(const void* p, __m256i high, __m256& lo, __m256& hi) {
  if constexpr (T == DType::kBF16) {
    const __m256i v = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    lo = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    hi = _mm256_castsi256_ps(_mm256_and_si256(v, high));
  } else if constexpr (T == DType::kF16) {
    (void)high;
    const auto* w = static_cast<const __m128i*>(p);
    lo = _mm256_cvtph_ps(_mm_loadu_si128(w));
    hi = _mm256_cvtph_ps(_mm_loadu_si128(w + 1));
  } else {
    (void)high;
    const auto* w = static_cast<const float*>(p);
    lo = _mm256_loadu_ps(w);
    hi = _mm256_loadu_ps(w + 8);
  }
}

// R input rows x NQ quarters (16 rows each) of one group, over kn values of k. w: the group's
// first quarter taken at this pass's first k (kP values a k); x: the first input row at this
// pass's first k; acc: the item's accumulator tile at the first row and quarter (row stride kP),
// read back unless `first` (the chain starts at +0). Each accumulator lane is one output's
// chain: one fma per k, in k order.
template <DType T, int NQ, int R>
TP_AVX2 void panel_block(const char* w, const float* x, int64_t ldx, float* acc, int64_t kn,
                         bool first, Prefetch& pf) {
  constexpr int64_t kE = elem_bytes(T);
  __m256 a[R][NQ][2];
  TP_UNROLL for (int r = 0; r < R; ++r) TP_UNROLL for (int q = 0; q < NQ; ++q)
      TP_UNROLL for (int h = 0; h < 2; ++h) a[r][q][h] =
          first ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + r * kP + q * kQuarter + h * 8);
  const __m256i high = _mm256_set1_epi32(int32_t(0xFFFF0000u));
  // This block's share of the prefetch: a line every `every` steps, in registers.
  const char* pn = pf.next;
  const int64_t quota = std::min(kn, std::min(pf.per_block, (pf.end - pn + 63) / 64));
  const char* const pe = pn + quota * 64;
  pf.next = pe;
  const int64_t every = quota > 0 ? kn / quota : kn + 1;
  int64_t countdown = 1;
  for (int64_t k = 0; k < kn; ++k) {
    if (--countdown == 0) {
      countdown = every;
      if (pn < pe) {
        _mm_prefetch(pn, _MM_HINT_T0);
        pn += 64;
      }
    }
    // Quarter by quarter, so that only its two widened vectors are live beside the accumulators
    // (2 NQ R + 3 registers with the mask: at most 16).
    TP_UNROLL for (int q = 0; q < NQ; ++q) {
      __m256 lo, hi;  // rows 16 q + 0..7, 16 q + 8..15
      widen_quarter<T>(w + (k * kP + q * kQuarter) * kE, high, lo, hi);
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

// Quarters per register block for R rows: 4 x 1 (8 accumulators hide the fma latency for one
// row), 2 x 2, or one quarter for 4-6 rows (up to 12 accumulators).
constexpr int quarters_per_block(int R) { return R == 1 ? 4 : R == 2 ? 2 : 1; }

// Every quarter of the group for R rows, in blocks of quarters_per_block(R). Three rows run as
// two and one: 2 x 3 would need 17 registers (GCC keeps the 3 broadcasts for both quarters, and
// spilled an accumulator to the stack: a store and reload in its chain every k).
template <DType T, int R>
TP_AVX2 void panel_rows(const char* w, const float* x, int64_t ldx, float* acc, int64_t kn,
                        bool first, Prefetch& pf) {
  static_assert(R != 3, "three rows run as two and one");
  constexpr int NQ = quarters_per_block(R);
  TP_UNROLL for (int q = 0; q < int(kP / kQuarter); q += NQ)
      panel_block<T, NQ, R>(w + q * kQuarter * elem_bytes(T), x, ldx, acc + q * kQuarter, kn,
                            first, pf);
}

// Register blocks a pass runs for `rows` input rows (6-row blocks, then the remainder).
constexpr int64_t blocks_per_pass(int64_t rows) {
  constexpr int64_t kQ = kP / kQuarter;
  const int64_t rem = rows % 6;
  const int64_t tail = rem == 0   ? 0
                       : rem == 3 ? kQ / quarters_per_block(2) + kQ / quarters_per_block(1)
                                  : kQ / quarters_per_block(int(rem));
  return rows / 6 * kQ + tail;
}

struct Operands {
  const float* x;
  int64_t ldx;
  const char* w;
  const char* w_end;  // the last group's end
  DType t;            // the plain type of the weight's values
  const float* bias;
  float* out;
  int64_t ldo;
  int64_t M, N, K;
};

// Rows [m0, m1) (at most kItemRows) against group g: pass after pass over K, every row of the
// item through each pass, then the item's outputs written with the bias added.
template <DType T>
TP_AVX2 void run_item(const Operands& o, int64_t g, int64_t m0, int64_t m1) {
  constexpr int64_t kE = elem_bytes(T), kKBlock = kPassBytes / (kP * kE);
  alignas(32) float acc[kItemRows * kP];
  const char* wg = o.w + g * kP * o.K * kE;
  const int64_t blocks = blocks_per_pass(m1 - m0);
  for (int64_t k0 = 0; k0 < o.K; k0 += kKBlock) {
    const int64_t kn = std::min(kKBlock, o.K - k0);
    const char* w = wg + k0 * kP * kE;
    const bool first = k0 == 0;
    // The next pass (past the group's end: the next group's start, which this thread's next item
    // usually is), within the weights.
    const char* next = w + kn * kP * kE;
    const char* end = next + std::min<int64_t>(kPassBytes, o.w_end - next);
    const int64_t lines = (end - next + 63) / 64;
    Prefetch pf{next, end, (lines + blocks - 1) / blocks};
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
  const bool parallel = o.N * o.K * o.M > (int64_t(1) << 16);
  StealingSchedule schedule(groups * chunks, parallel);
  parallel_if(parallel, [&] {
    schedule.for_each([&](int64_t item) {
      const int64_t g = item / chunks, m0 = item % chunks * kItemRows;
      const int64_t m1 = std::min(o.M, m0 + kItemRows);
      switch (o.t) {
        case DType::kBF16:
          run_item<DType::kBF16>(o, g, m0, m1);
          break;
        case DType::kF16:
          run_item<DType::kF16>(o, g, m0, m1);
          break;
        default:
          run_item<DType::kF32>(o, g, m0, m1);
          break;
      }
    });
  });
}

void check_packed(const Tensor& p, const char* where) {
  TP_CHECK(dtype_is_panels(p.dtype()) && p.ndim() == 2 && p.strides()[1] == 1 &&
               p.strides()[0] == p.dim(1),
           "[", where, "] got ", p.describe(),
           ", expected an f32x64, bf16x64 or f16x64 (panel-packed) tensor");
}

// packed: the weight in panels (else plain f32, bf16 or f16, the oracle's).
void check_operands(const Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                    bool packed, const char* where) {
  TP_CHECK(in.ndim() == 2 && in.dtype() == DType::kF32 && in.strides()[1] == 1, "[", where,
           "] in: got ", in.describe(), ", expected f32 (M,K) with unit column stride");
  const DType wt = weight.dtype();
  TP_CHECK(weight.ndim() == 2 && (packed ? dtype_is_panels(wt) : dtype_is_float(wt)) &&
               weight.strides()[1] == 1 && weight.dim(1) == in.dim(1),
           "[", where, "] weight: got ", weight.describe(), ", expected ",
           packed ? "f32x64, bf16x64 or f16x64" : "f32, bf16 or f16", " (N,", in.dim(1),
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

const char* bytes(const Tensor& t) { return static_cast<const char*>(t.raw()); }

// n values of e bytes (2 or 4) from src to dst, ss and ds values apart.
template <typename V>
void copy_values(char* dst, int64_t ds, const char* src, int64_t ss, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    std::memcpy(dst + i * ds * int64_t(sizeof(V)), src + i * ss * int64_t(sizeof(V)), sizeof(V));
}
void copy_strided(char* dst, int64_t ds, const char* src, int64_t ss, int64_t n, int64_t e) {
  if (e == 4)
    copy_values<uint32_t>(dst, ds, src, ss, n);
  else
    copy_values<uint16_t>(dst, ds, src, ss, n);
}

}  // namespace

bool panels_usable() {
  return quant_detail::cpu_has_avx2();
}

Tensor pack_panels(const Tensor& w) {
  const DType t = w.dtype();
  TP_CHECK(dtype_is_float(t) && w.ndim() == 2 && w.strides()[1] == 1, "[pack_panels] got ",
           w.describe(), ", expected a 2-D f32, bf16 or f16 tensor with unit column stride");
  const int64_t N = w.dim(0), K = w.dim(1), ldw = w.strides()[0], groups = (N + kP - 1) / kP;
  const int64_t e = elem_bytes(t);
  Tensor p = Tensor::zeros({groups * kP, K}, dtype_panels(t));
  const char* src = bytes(w);
  char* dst = static_cast<char*>(p.raw());
#pragma omp parallel for schedule(static) if (N * K > (int64_t(1) << 20))
  for (int64_t g = 0; g < groups; ++g)
    for (int64_t j = 0; j < kP && g * kP + j < N; ++j) {
      const char* row = src + (g * kP + j) * ldw * e;
      char* col = dst + (g * kP * K + panel_pos(t, j)) * e;
      copy_strided(col, kP, row, 1, K, e);
    }
  return p.slice(0, 0, N);
}

Tensor unpack_panels(const Tensor& packed) {
  check_packed(packed, "unpack_panels");
  const int64_t N = packed.dim(0), K = packed.dim(1);
  const DType t = dtype_unpacked(packed.dtype());
  const int64_t e = elem_bytes(t);
  Tensor w = Tensor::empty({N, K}, t);
  const char* src = bytes(packed);
  char* dst = static_cast<char*>(w.raw());
#pragma omp parallel for schedule(static) if (N * K > (int64_t(1) << 20))
  for (int64_t r = 0; r < N; ++r) {
    const char* col = src + (r / kP * kP * K + panel_pos(t, r % kP)) * e;
    copy_strided(dst + r * K * e, 1, col, kP, K, e);
  }
  return w;
}

void panel_row_f32(const Tensor& packed, int64_t r, float* dst) {
  check_packed(packed, "panel_row_f32");
  TP_CHECK(r >= 0 && r < packed.dim(0), "[panel_row_f32] row ", r, " of ", packed.describe());
  const int64_t K = packed.dim(1);
  const DType t = packed.dtype();
  const int64_t col = r / kP * kP * K + panel_pos(t, r % kP);
  for (int64_t k = 0; k < K; ++k) dst[k] = widen(t, packed.raw(), col + k * kP);
}

void panel_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias) {
  const char* where = "panel_matmul_forward";
  check_operands(out, in, weight, bias, true, where);
  check_packed(weight, where);
  TP_CHECK(panels_usable(), "[", where, "] this CPU lacks AVX2, FMA or F16C");
  const int64_t M = in.dim(0), N = weight.dim(0), K = in.dim(1);
  const DType t = dtype_unpacked(weight.dtype());
  const Operands o{in.data<float>(),
                   in.strides()[0],
                   bytes(weight),
                   bytes(weight) + (N + kP - 1) / kP * kP * K * elem_bytes(t),
                   t,
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
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const float* x = in.data<float>() + m * in.strides()[0];
      float acc = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        acc = std::fma(widen(t, weight.raw(), n * weight.strides()[0] + k), x[k], acc);
      out.data<float>()[m * out.strides()[0] + n] = acc + (bias ? bias->data<float>()[n] : 0.0f);
    }
}

}  // namespace tensorpar

// AVX512-BF16 matmul (see avx512bf16_matmul.h). The activations are rounded to bf16 once into
// rows of Kp = K rounded up to 32 (zeros past K); a weight row's last partial chunk is loaded
// masked (zeros past K), so every chunk is a whole VDPBF16PS. Input rows are taken in chunks of
// kRowChunk (their bf16 copy stays in L2); within a chunk, threads split the weight rows in
// blocks of 6, each block multiplied against the chunk's rows 4 at a time (24 accumulators; 6 x 4
// beat 8 x 3 at 16 rows by 10%: no group of one row left over); one input row takes the weight
// rows one at a time (kStreamMaxRows). The block shape never changes a result: each
// output is one accumulator over the chunks in order, summed by the same lane tree.
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593); the warning is about the header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "kernels/cpu/avx512bf16_matmul.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/avx512_reduce.h"
#include "kernels/cpu/bf16_operands.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/parallel_if.h"
#include "kernels/cpu/stealing_schedule.h"
#include "kernels/cpu/unroll.h"

namespace tensorpar {

namespace {

constexpr int kChunk = 32;        // bf16 values of K per VDPBF16PS
constexpr int kWRows = 6;         // weight rows per register block
constexpr int kXRows = 4;         // input rows per register block (24 accumulators)
// At one input row nothing of a weight row is reused and the weights stream from memory: each
// thread then walks its weight rows one at a time, a single sequential stream (6 rows side by
// side were 6 streams a row apart, which the hardware prefetchers follow worse: the 0.7B
// model's one-row decode step 26 ms against 34-37 on a quiet memory bus). Two rows this way won
// on a quiet bus (36 against 37-40 ms) and lost on a busy one (52 against 47-49), three lost on
// both (60 against 41-43): they keep the blocks (docs/BENCHMARKS.md).
constexpr int64_t kStreamMaxRows = 1;
constexpr int64_t kRowChunk = 64;  // input rows whose bf16 copy stays in L2 while the weight streams
constexpr int64_t kSlab = 2048;    // values of K per pass of a block (a K up to 1.5x this is one slab)
constexpr int64_t kPartialFloats = kWRows * kXRows * 16;  // one block's accumulators between slabs

struct Operands : Bf16Operands {
  int64_t Kp;          // K rounded up to whole chunks
  const uint16_t* xb;  // bf16 activations (M, Kp)
};

constexpr auto round_up = round_up_to;

#define TP_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))


// One chunk of 32 values of K into every accumulator of the block; `mask` zeroes the weights past
// K in the last chunk (the activations there are zeros already).
template <int WR, int XR>
TP_AVX512BF16 inline __attribute__((always_inline)) void chunk(__m512 (&acc)[WR][XR], const uint16_t* wb,
                                                               int64_t ldw, const uint16_t* xb, int64_t ldx,
                                                               int64_t k, __mmask32 mask) {
  // The input rows stay in registers; each weight row is loaded and used at once (24
  // accumulators + 4 inputs + a weight row fit the 32 registers).
  __m512i x[XR];
  TP_UNROLL for (int j = 0; j < XR; ++j) x[j] = _mm512_load_si512(xb + j * ldx + k);
  TP_UNROLL for (int i = 0; i < WR; ++i) {
    const __m512i w = _mm512_maskz_loadu_epi16(mask, wb + i * ldw + k);
    TP_UNROLL for (int j = 0; j < XR; ++j) acc[i][j] = _mm512_dpbf16_ps(acc[i][j], (__m512bh)w, (__m512bh)x[j]);
  }
}

// The chunks [k0, k1) of one register block. A long K is walked in slabs (so that a block's
// weight rows and input rows of one slab stay in L1 together); between slabs the 16-lane
// accumulators wait in `partial` (WR x XR vectors, exact), so every output still sees the same
// chunk sequence and the same final reduction. `prefetch`: pf_rows weight rows (pf_stride apart;
// 0: none) to pull into L2 while this block computes, one line per row and chunk from their
// start: weights the next slab will read (into L2, not L1: this block's rows stay in L1).
template <int WR, int XR>
TP_AVX512BF16 void block(const Operands& o, int64_t n0, int64_t m0, int64_t k0, int64_t k1, float* partial,
                         const uint16_t* prefetch = nullptr, int pf_rows = 0, int64_t pf_stride = 0) {
  __m512 acc[WR][XR];
  TP_UNROLL for (int i = 0; i < WR; ++i)
    TP_UNROLL for (int j = 0; j < XR; ++j)
      acc[i][j] = k0 == 0 ? _mm512_setzero_ps() : _mm512_load_ps(partial + (i * XR + j) * 16);
  const uint16_t* wb = o.w + n0 * o.ldw;
  const uint16_t* xb = o.xb + m0 * o.Kp;
  const int64_t full = std::min(k1, o.K / kChunk * kChunk);
  for (int64_t k = k0; k < full; k += kChunk) {
    for (int i = 0; i < pf_rows; ++i)
      _mm_prefetch(reinterpret_cast<const char*>(prefetch + i * pf_stride + (k - k0)), _MM_HINT_T1);
    chunk<WR, XR>(acc, wb, o.ldw, xb, o.Kp, k, ~__mmask32(0));
  }
  if (k1 < o.Kp) {
    TP_UNROLL for (int i = 0; i < WR; ++i)
      TP_UNROLL for (int j = 0; j < XR; ++j) _mm512_store_ps(partial + (i * XR + j) * 16, acc[i][j]);
    return;
  }
  if (full < o.K) chunk<WR, XR>(acc, wb, o.ldw, xb, o.Kp, full, __mmask32((uint64_t(1) << (o.K - full)) - 1));
  // Per input row, the WR outputs side by side (one masked store), each its accumulator's lane
  // sum plus the bias.
  static_assert(WR <= 8);
  const __mmask8 rows = __mmask8((1u << WR) - 1);
  const __m256 b = o.bias ? _mm256_maskz_loadu_ps(rows, o.bias + n0) : _mm256_setzero_ps();
  TP_UNROLL for (int j = 0; j < XR; ++j) {
    __m512 v[8];
    TP_UNROLL for (int i = 0; i < 8; ++i) v[i] = i < WR ? acc[i][j] : _mm512_setzero_ps();
    _mm256_mask_storeu_ps(o.out + (m0 + j) * o.ldo + n0, rows, _mm256_add_ps(reduce_add_8(v), b));
  }
}

// Weight rows [n0, n0 + WR) against input rows [m_begin, m_end), slab by slab; `partial` holds
// one block's accumulators for each group of kXRows input rows.
template <int WR>
TP_AVX512BF16 void weight_rows(const Operands& o, int64_t n0, int64_t m_begin, int64_t m_end, float* partial) {
  // One group of input rows reuses nothing across slabs: it takes K whole.
  const int64_t slab = m_end - m_begin > kXRows ? kSlab : o.Kp;
  for (int64_t k0 = 0, k1 = 0; k0 < o.Kp; k0 = k1) {
    k1 = o.Kp - k0 <= slab + slab / 2 ? o.Kp : k0 + slab;  // no short last slab
    int64_t m = m_begin;
    float* p = partial;
    // With several groups of input rows the first group's weight loads would wait on memory while
    // the others find them in cache: the groups prefetch what comes next (the next slab of these
    // rows, or the next block's first), so the transfer overlaps all the groups' compute.
    const uint16_t* pf = nullptr;
    int pf_rows = 0;
    if (m_end - m_begin > kXRows) {
      if (k1 < o.Kp)
        pf = o.w + n0 * o.ldw + k1, pf_rows = WR;
      else if (n0 + WR < o.N)
        pf = o.w + (n0 + WR) * o.ldw, pf_rows = int(std::min<int64_t>(kWRows, o.N - n0 - WR));
    }
    // Each group prefetches its share of those rows (group g: rows g, g + groups, ...): asked for
    // by the first group alone, the whole next block's lines queued behind each other and stalled
    // that group's loads (M = 16: 12-20% slower, `bench gemm --inference`).
    const int64_t groups = (m_end - m_begin) / kXRows;
    for (int64_t g = 0; m + kXRows <= m_end; m += kXRows, p += kPartialFloats, ++g) {
      const int rows = g < pf_rows ? int((pf_rows - 1 - g) / groups + 1) : 0;
      block<WR, kXRows>(o, n0, m, k0, k1, p, rows ? pf + g * o.ldw : nullptr, rows, groups * o.ldw);
    }
    static_assert(kXRows == 4, "the remainder cases below are kXRows - 1 ... 1");
    switch (m_end - m) {
      case 3: block<WR, 3>(o, n0, m, k0, k1, p); break;
      case 2: block<WR, 2>(o, n0, m, k0, k1, p); break;
      case 1: block<WR, 1>(o, n0, m, k0, k1, p); break;
      default: break;
    }
  }
}

TP_AVX512BF16 void run(const Operands& o) {
  const int64_t wrows = o.M <= kStreamMaxRows ? 1 : kWRows;  // weight rows per block
  const int64_t blocks = (o.N + wrows - 1) / wrows;
  // Per chunk of input rows, each thread streams its own stretch of weight rows; a late thread's
  // tail is shared. The chunks write disjoint outputs: a thread goes on to the next without a
  // barrier.
  const bool parallel = o.N * o.K * std::max<int64_t>(1, o.M) > (int64_t(1) << 16);
  std::vector<StealingSchedule> chunks;
  for (int64_t c0 = 0; c0 < o.M; c0 += kRowChunk) chunks.emplace_back(blocks, parallel);
  parallel_if(parallel, [&] {
#pragma omp for schedule(static)
    for (int64_t m = 0; m < o.M; ++m) {
      uint16_t* dst = const_cast<uint16_t*>(o.xb) + m * o.Kp;
      const float* src = o.x + m * o.ldx;
      f32_to_bf16_n(reinterpret_cast<bf16*>(dst), src, o.K);
      std::memset(dst + o.K, 0, size_t(o.Kp - o.K) * sizeof(uint16_t));
    }
    alignas(64) float partial[(kRowChunk + kXRows - 1) / kXRows * kPartialFloats];
    for (size_t c = 0; c < chunks.size(); ++c) {
      const int64_t c0 = int64_t(c) * kRowChunk, c1 = std::min(o.M, c0 + kRowChunk);
      chunks[c].for_each([&](int64_t b) {
        const int64_t n0 = b * wrows;
        static_assert(kWRows == 6, "the cases below are kWRows ... 1");
        switch (std::min<int64_t>(wrows, o.N - n0)) {
          case 6: weight_rows<6>(o, n0, c0, c1, partial); break;
          case 5: weight_rows<5>(o, n0, c0, c1, partial); break;
          case 4: weight_rows<4>(o, n0, c0, c1, partial); break;
          case 3: weight_rows<3>(o, n0, c0, c1, partial); break;
          case 2: weight_rows<2>(o, n0, c0, c1, partial); break;
          default: weight_rows<1>(o, n0, c0, c1, partial); break;
        }
      });
    }
  });
}

}  // namespace

bool avx512_bf16_usable() {
  static const bool usable = [] {
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
    const bool f = (b >> 16) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    if (!__get_cpuid_count(7, 1, &a, &b, &c, &d)) return false;
    return f && bw && vl && ((a >> 5) & 1);
  }();
  return usable;
}

int64_t avx512bf16_scratch_bytes(int64_t M, int64_t K) {
  return std::max<int64_t>(M, 1) * round_up(std::max<int64_t>(K, 1), kChunk) * int64_t(sizeof(uint16_t));
}

void avx512bf16_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                               void* scratch) {
  const Bf16Operands b =
      check_bf16_operands(out, in, weight, bias, scratch, "avx512bf16_matmul_forward");
  TP_CHECK(avx512_bf16_usable(), "[avx512bf16_matmul_forward] this CPU has no AVX512-BF16");
  TP_CHECK(scratch, "[avx512bf16_matmul_forward] no scratch");
  const Operands o{b, round_up(b.K, kChunk), static_cast<const uint16_t*>(scratch)};
  if (o.M == 0 || o.N == 0) return;
  run(o);
}

}  // namespace tensorpar

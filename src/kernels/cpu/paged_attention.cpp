// Paged attention (see paged_attention.h): per work item (a group of up to eight consecutive
// rows of one sequence, one kv head), the heads of the group (in tiles of up to five, sharing
// each key and value load) score every key of the sequence through its block table, a block of
// 64 keys at a time for every row of the group (the block stays in L1/L2 while the rows pass
// it), then softmax and sum in key order (two passes over stored scores, no online rescaling);
// each row stops at its own position (causal) and starts at the oldest key of its sliding window
// (if any), so no masked score enters any sum.
#include "kernels/cpu/paged_attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/parallel_if.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "kernels/cpu/target_isa.h"
#include "kernels/cpu/unroll.h"

#if defined(__x86_64__)
// GCC 12 falsely flags the intrinsic headers' undefined-vector idiom in target-attribute
// functions (its bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#endif

namespace tensorpar {

namespace {

constexpr int64_t kMinParallelWork = int64_t(1) << 15;

// TP_VECTOR_CLONES (fast_math.h): every score and output is an fma chain, which without FMA in
// the clone would be a libm call per element.
#define TP_FMA_CLONES TP_VECTOR_CLONES
constexpr int64_t kLanes = 16;  // keys scored side by side
// The helpers below are inlined into row_group's clones, so each runs with its clone's ISA (FMA
// included); an outlined copy would be built for the baseline ISA, where std::fma is a libm call.
#define TP_INLINE inline __attribute__((always_inline))
#define TP_INLINE_LAMBDA __attribute__((always_inline))

PagedAttentionDims resolve(const PagedAttentionDims& in, std::span<const PagedSeq> seqs, const char* where) {
  PagedAttentionDims d = in;
  TP_CHECK(d.window >= 0, "[", where, "] window: got ", d.window, ", expected >= 0 (0: no window)");
  TP_CHECK(d.NH > 0 && d.NKV > 0 && d.HS > 0 && d.block_size > 0 && d.NH % d.NKV == 0, "[", where,
           "] sizes: got NH=", d.NH, " NKV=", d.NKV, " HS=", d.HS, " block_size=", d.block_size,
           ", expected positive with NH a multiple of NKV");
  for (const PagedSeq& s : seqs)
    TP_CHECK(s.T >= 0 && s.pos0 >= 0 && s.row_begin >= 0 && s.n_blocks * d.block_size >= s.pos0 + s.T, "[", where,
             "] sequence at row ", s.row_begin, ": ", s.T, " rows at position ", s.pos0, " need ",
             (s.pos0 + s.T + d.block_size - 1) / d.block_size, " blocks, the table has ", s.n_blocks);
  if (d.scale == 0) d.scale = 1.0f / std::sqrt(static_cast<float>(d.HS));
  return d;
}


// Heads of one kv group taken together: they share every key and value load, so the loops over
// keys read each key and value once per tile of heads instead of once per head. A group's heads
// are split into tiles of at most kHeadTile, as even as possible (5 heads: one tile of 5, not
// 4 + 1).
constexpr int kHeadTile = 5;
// Consecutive rows of one sequence (a prompt) taken together: each block of kKeyBlock keys (and
// of its values) is loaded once and used by every row of the group while it sits in L1/L2, where
// row by row every row streamed all of its keys from L3 again.
constexpr int64_t kRowGroup = 8;
constexpr int64_t kKeyBlock = 4 * kLanes;

// Vector registers of kLanes floats: 32 on an AVX-512 CPU, 8 on an AVX2 one (16 of 8 floats).
// The kernels below keep every fma chain of a pass in registers; past the count GCC spills
// chains to the stack (AVX2, 3 heads x 4 chunks of scores: a store and a reload with every fma,
// about twice the time). The avx512f check is the one that picks TP_VECTOR_CLONES' clone.
TP_INLINE bool wide_registers() { return __builtin_cpu_supports("avx512f"); }
constexpr int kWideRegisters = 32, kNarrowRegisters = 8;

// The most of 4, 2, 1 vectors per head a pass of H heads takes in `regs` registers, `extra(n)`
// of them holding operands beside the H n accumulators.
constexpr int vectors_per_head(int H, int regs, int (*extra)(int)) {
  for (int n : {4, 2}) if (H * n + extra(n) <= regs) return n;
  return 1;
}
// Key chunks of a score pass: a key vector and a query beside the accumulators.
constexpr int chunks_per_pass(int H, int regs) {
  return vectors_per_head(H, regs, [](int) { return 2; });
}
// Column vectors of a value pass: a key's values beside them. (With AVX2, 3 heads x 2 fill the
// 16 registers and GCC keeps the probability's broadcast by spilling one chain; half as many
// columns a pass, which reads each key's values twice, measured no faster.)
constexpr int columns_per_pass(int H, int regs) {
  return vectors_per_head(H, regs, [](int n) { return n; });
}

// Scores of H heads (queries q + h * HS) against the lane chunks [c0, c0 + C) of 16 keys at
// ptr[c] (transposed: element i of lane l at ptr[c][i * bs + l]), stored for the chunks in
// [c_lo, c_hi) at scores[h * stride + c * kLanes].
template <int H, int C>
TP_INLINE void score_pass(float* scores, int64_t stride, const float* q, const float* const (&ptr)[4], int64_t HS,
                          int64_t bs, int64_t c0, int64_t c_lo, int64_t c_hi) {
  float acc[H][C][kLanes] = {};
  for (int64_t i = 0; i < HS; ++i) {
    TP_UNROLL for (int c = 0; c < C; ++c) {
      const float* kc = ptr[c0 + c] + i * bs;
      TP_UNROLL for (int h = 0; h < H; ++h) {
        const float qi = q[h * HS + i];
#pragma omp simd
        for (int64_t l = 0; l < kLanes; ++l) acc[h][c][l] = std::fma(qi, kc[l], acc[h][c][l]);
      }
    }
  }
  for (int64_t c = std::max(c0, c_lo); c < std::min<int64_t>(c0 + C, c_hi); ++c)
    for (int h = 0; h < H; ++h) std::copy(acc[h][c - c0], acc[h][c - c0] + kLanes, scores + h * stride + c * kLanes);
}

// The scores of the four chunks' keys stored for chunks [c_lo, c_hi), in passes of C chunks
// (as many as the registers hold). Each score is its own fma chain over i, whatever H and C are.
template <int H, int C>
TP_INLINE void score_passes(float* scores, int64_t stride, const float* q, const float* const (&ptr)[4], int64_t HS,
                            int64_t bs, int64_t c_lo, int64_t c_hi) {
  for (int64_t c0 = c_lo / C * C; c0 < c_hi; c0 += C) score_pass<H, C>(scores, stride, q, ptr, HS, bs, c0, c_lo, c_hi);
}

template <int H>
TP_INLINE void score_chunks(float* scores, int64_t stride, const float* q, const float* const (&ptr)[4], int64_t HS,
                            int64_t bs, int64_t c_lo, int64_t c_hi) {
  if (wide_registers())
    score_passes<H, chunks_per_pass(H, kWideRegisters)>(scores, stride, q, ptr, HS, bs, c_lo, c_hi);
  else score_passes<H, chunks_per_pass(H, kNarrowRegisters)>(scores, stride, q, ptr, HS, bs, c_lo, c_hi);
}

// The same scores for any block size (tests, short one-sequence caches): key by key, keys
// [first, first + n) into scores[h * stride + j - first].
TP_INLINE void scores_any(float* scores, int64_t stride, int H, const float* q, const float* k_pool,
                       const int32_t* blocks, int64_t first, int64_t n, int64_t NKV, int64_t g, int64_t HS,
                       int64_t bs) {
  for (int h = 0; h < H; ++h)
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t j = first + jj;
      const float* kt = k_pool + (int64_t(blocks[j / bs]) * NKV + g) * HS * bs + j % bs;
      float a = 0.0f;
      for (int64_t i = 0; i < HS; ++i) a = std::fma(q[h * HS + i], kt[i * bs], a);
      scores[h * stride + jj] = a;
    }
}

// The value rows of a paged pool (f32 or f16). for_each(j0, j1, col, f) calls f(j, row) for keys
// j in [j0, j1) in order, row pointing at column col of key j's values: a block's keys are
// kv_stride apart, so the block table is read (and j divided) once a block, not once a key (a
// division per key cost more than the key's fmas).
template <typename T>
struct PagedValueRows {
  const T* v_pool;
  const int32_t* blocks;
  int64_t kv_stride, bs;
  template <typename F>
  TP_INLINE void for_each(int64_t j0, int64_t j1, int64_t col, F&& f) const {
    for (int64_t j = j0; j < j1;) {
      const int64_t off = j % bs, end = std::min(j1, j + bs - off);
      const T* vr = v_pool + (int64_t(blocks[j / bs]) * bs + off) * kv_stride + col;
      for (; j < end; ++j, vr += kv_stride) f(j, vr);
    }
  }
};
// For each of H heads: o + h * HS (w values) += sum over keys [j0, j1) of p[h * stride + j]
// v_j[col .. col + w), each element its own fma chain in key order (o holds the chain's value
// after the keys before j0: zero before the first). C lane vectors (w == 16 C) are held per
// head, unrolled so they stay in registers (as score_chunks' accumulators); another width
// element by element. Either way each element gets the same chain.
template <int H, int C>
TP_INLINE void weighted_values_in_registers(float* o, int64_t HS, const float* p, int64_t stride,
                                            const PagedValueRows<float>& v, int64_t j0, int64_t j1, int64_t col) {
  float a[H][C][kLanes];
  TP_UNROLL for (int h = 0; h < H; ++h)
    TP_UNROLL for (int c = 0; c < C; ++c) std::copy(o + h * HS + c * kLanes, o + h * HS + (c + 1) * kLanes, a[h][c]);
  v.for_each(j0, j1, col, [&](int64_t j, const float* vr) TP_INLINE_LAMBDA {
    TP_UNROLL for (int h = 0; h < H; ++h) {
      const float pj = p[h * stride + j];
      TP_UNROLL for (int c = 0; c < C; ++c) {
#pragma omp simd
        for (int64_t l = 0; l < kLanes; ++l) a[h][c][l] = std::fma(pj, vr[c * kLanes + l], a[h][c][l]);
      }
    }
  });
  TP_UNROLL for (int h = 0; h < H; ++h)
    TP_UNROLL for (int c = 0; c < C; ++c) std::copy(a[h][c], a[h][c] + kLanes, o + h * HS + c * kLanes);
}

template <int H>
TP_INLINE void weighted_values(float* o, int64_t HS, const float* p, int64_t stride, const PagedValueRows<float>& v,
                               int64_t j0, int64_t j1, int64_t col, int64_t w) {
  // 16, 32 or 64 columns (a decode step's team splits a head's columns, below) in registers, in
  // passes of as many as they hold.
  if (w == 4 * kLanes || w == 2 * kLanes || w == kLanes) {
    const int C = std::min<int>(int(w / kLanes), columns_per_pass(H, wide_registers() ? kWideRegisters
                                                                                       : kNarrowRegisters));
    for (int64_t c0 = 0; c0 < w; c0 += C * kLanes) {
      float* oc = o + c0;
      if (C == 4) weighted_values_in_registers<H, 4>(oc, HS, p, stride, v, j0, j1, col + c0);
      else if (C == 2) weighted_values_in_registers<H, 2>(oc, HS, p, stride, v, j0, j1, col + c0);
      else weighted_values_in_registers<H, 1>(oc, HS, p, stride, v, j0, j1, col + c0);
    }
    return;
  }
  v.for_each(j0, j1, col, [&](int64_t j, const float* vr) TP_INLINE_LAMBDA {
    for (int h = 0; h < H; ++h) {
      const float pj = p[h * stride + j];
      float* oh = o + h * HS;
      for (int64_t l = 0; l < w; ++l) oh[l] = std::fma(pj, vr[l], oh[l]);
    }
  });
}

// Calls f.template operator()<H>(h0) for the tiles of heads [0, G): ceil(G / kHeadTile) tiles of
// as even sizes as possible.
template <typename F>
TP_INLINE void for_head_tiles(int64_t G, F&& f) {
  const int64_t tiles = (G + kHeadTile - 1) / kHeadTile;
  for (int64_t t = 0, h0 = 0; t < tiles; ++t) {
    const int64_t H = (G - h0 + (tiles - t) - 1) / (tiles - t);
    switch (H) {
      case 5: f.template operator()<5>(h0); break;
      case 4: f.template operator()<4>(h0); break;
      case 3: f.template operator()<3>(h0); break;
      case 2: f.template operator()<2>(h0); break;
      default: f.template operator()<1>(h0); break;
    }
    h0 += H;
  }
}

// The largest of x[0, n), 16 lanes at a time (as `a > b ? a : b`, the form that vectorizes to
// a vector max; std::max under `omp simd reduction(max)` stayed scalar).
TP_INLINE float max_of(const float* x, int64_t n) {
  float lanes[kLanes];
  std::fill(lanes, lanes + kLanes, -std::numeric_limits<float>::infinity());
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
#pragma omp simd
    for (int64_t l = 0; l < kLanes; ++l) lanes[l] = lanes[l] > x[j + l] ? lanes[l] : x[j + l];
  }
  for (; j < n; ++j) lanes[0] = lanes[0] > x[j] ? lanes[0] : x[j];
  float m = lanes[0];
  for (int64_t l = 1; l < kLanes; ++l) m = m > lanes[l] ? m : lanes[l];
  return m;
}

// One row's scores sc[0, n) scaled, then exp(score - max) in place; returns their sum (the
// softmax's denominator). `scale` by value: read through a struct, each store to the scores
// could alias it (no vectors).
TP_INLINE float softmax_numerators(float* sc, int64_t n, float scale) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) sc[j] *= scale;
  const float m = max_of(sc, n);
  float total = 0.0f;
#pragma omp simd reduction(+ : total)
  for (int64_t j = 0; j < n; ++j) {
    sc[j] = fast_exp(sc[j] - m);
    total += sc[j];
  }
  return total;
}

// The first key a row at `pos` sees (its sliding window's, or key 0). Depends on the position
// only, never on the batch.
TP_INLINE int64_t first_key(int64_t pos, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, pos + 1 - window) : 0;
}

// Rows [t0, t0 + R) of sequence s, the G heads of kv head g (query and output row r at q + r *
// ldq and out + r * ldo, head h at + h * HS): every score of each row first (and its max), then
// the exponentials, then the weighted values in key order. Nothing depends on how keys are
// grouped into blocks, how rows are grouped or batched or how heads are tiled: each score and
// each output element is one fma chain in a fixed order, and its softmax runs over the same
// aligned span. scores: R * G rows of `stride` floats (64-byte aligned, stride a multiple of 16)
// holding at least pos - base + kKeyBlock each; sums: R * G floats.
TP_FMA_CLONES void row_group(float* out, int64_t ldo, const float* q, int64_t ldq, const float* k_pool,
                             const float* v_pool, const PagedSeq& s, int64_t t0, int64_t R, int64_t g,
                             const PagedAttentionDims& d, float* scores, int64_t stride, float* sums) {
  const int64_t HS = d.HS, bs = d.block_size, G = d.NH / d.NKV, h_begin = g * G;
  const int64_t kv_stride = d.NKV * HS;  // between tokens of a block
  const int64_t pos0 = s.pos0 + t0, end = pos0 + R;  // keys [.., end) are seen by some row
  // Scores are stored by key from `base` (a key block boundary at or before the rows' first
  // key): a row's span starts at a lane boundary at or before its first key, so the transposed
  // lanes stay whole, and the extra scores are unused.
  const int64_t base = first_key(pos0, d.window) / kKeyBlock * kKeyBlock;
  auto score_row = [&](int64_t r, int64_t h) { return scores + (r * G + h) * stride; };
  auto row_span = [&](int64_t r) {  // [lane boundary at or before the first key, pos + 1)
    const int64_t pos = pos0 + r;
    return std::pair<int64_t, int64_t>(first_key(pos, d.window) / kLanes * kLanes, pos + 1);
  };
  if (bs % kLanes == 0) {
    const int64_t last_lane = (end - 1) / kLanes * kLanes;  // lanes past it repeat it (never read beyond)
    for (int64_t kb = base; kb < end; kb += kKeyBlock) {
      const float* ptr[4];
      for (int64_t c = 0; c < 4; ++c) {
        const int64_t key0 = std::min(kb + c * kLanes, last_lane);
        ptr[c] = k_pool + (int64_t(s.blocks[key0 / bs]) * d.NKV + g) * HS * bs + key0 % bs;
      }
      for (int64_t r = 0; r < R; ++r) {
        const auto [lo, hi] = row_span(r);
        if (hi <= kb || lo >= kb + kKeyBlock) continue;
        const int64_t c_lo = std::max<int64_t>(0, (lo - kb) / kLanes);
        const int64_t c_hi = std::min<int64_t>(4, (hi - kb + kLanes - 1) / kLanes);
        for_head_tiles(G, [&]<int H>(int64_t h0) TP_INLINE_LAMBDA {
          score_chunks<H>(score_row(r, h0) + (kb - base), stride, q + r * ldq + (h_begin + h0) * HS, ptr, HS, bs,
                          c_lo, c_hi);
        });
      }
    }
  } else {
    for (int64_t r = 0; r < R; ++r) {
      const auto [lo, hi] = row_span(r);
      scores_any(score_row(r, 0) + (lo - base), stride, int(G), q + r * ldq + h_begin * HS, k_pool, s.blocks, lo,
                 hi - lo, d.NKV, g, HS, bs);
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    const int64_t pos = pos0 + r, first = first_key(pos, d.window), n_keys = pos + 1 - first;
    for (int64_t h = 0; h < G; ++h) sums[r * G + h] = softmax_numerators(score_row(r, h) + (first - base), n_keys, d.scale);
    std::fill(out + r * ldo + h_begin * HS, out + r * ldo + (h_begin + G) * HS, 0.0f);
  }
  // Values a block of keys at a time, each block used by every row that sees its keys.
  const PagedValueRows<float> values{v_pool, s.blocks, kv_stride, bs};
  for (int64_t i0 = 0; i0 < HS; i0 += 64) {
    const int64_t w = std::min<int64_t>(64, HS - i0);
    for (int64_t kb = base; kb < end; kb += kKeyBlock)
      for (int64_t r = 0; r < R; ++r) {
        const int64_t pos = pos0 + r;
        const int64_t j0 = std::max(kb, first_key(pos, d.window)), j1 = std::min(kb + kKeyBlock, pos + 1);
        if (j0 >= j1) continue;
        for_head_tiles(G, [&]<int H>(int64_t h0) TP_INLINE_LAMBDA {
          weighted_values<H>(out + r * ldo + (h_begin + h0) * HS + i0, HS, score_row(r, h0) - base, stride, values,
                             j0, j1, g * HS + i0, w);
        });
      }
  }
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < G; ++h) {
      const float inv = 1.0f / sums[r * G + h];
      float* oh = out + r * ldo + (h_begin + h) * HS;
#pragma omp simd
      for (int64_t i = 0; i < HS; ++i) oh[i] *= inv;
    }
}

// Work items (group of rows, kv head) of a call, listed once so the loop can be split evenly.
struct WorkRows {
  struct Group {
    int32_t seq;
    int64_t t0, R;  // rows [t0, t0 + R) of the sequence
  };
  std::vector<Group> groups;
  int64_t keys = 0, max_keys = 1;
};

WorkRows list_rows(std::span<const PagedSeq> seqs, int64_t rows_per_group) {
  WorkRows w;
  for (size_t i = 0; i < seqs.size(); ++i) {
    for (int64_t t = 0; t < seqs[i].T; t += rows_per_group)
      w.groups.push_back({int32_t(i), t, std::min(rows_per_group, seqs[i].T - t)});
    for (int64_t t = 0; t < seqs[i].T; ++t) w.keys += seqs[i].pos0 + t + 1;
    if (seqs[i].T > 0) w.max_keys = std::max(w.max_keys, seqs[i].pos0 + seqs[i].T);
  }
  return w;
}

// Rows per group: kRowGroup, fewer where their scores would not fit in about 1 MiB (L2) or no
// sequence has that many rows (a decode step).
int64_t rows_per_group(std::span<const PagedSeq> seqs, const PagedAttentionDims& d) {
  int64_t max_keys = 1, max_rows = 1;
  for (const PagedSeq& s : seqs) max_keys = std::max(max_keys, s.pos0 + s.T), max_rows = std::max(max_rows, s.T);
  const int64_t row_floats = (d.NH / d.NKV) * (max_keys + 2 * kKeyBlock);
  return std::clamp<int64_t>((int64_t(1) << 18) / row_floats, 1, std::min(kRowGroup, max_rows));
}

// Per thread: R * G rows of scores, each 64-byte aligned, so no vector loop over one is ever
// peeled differently for another batch; and the rows' softmax sums.
struct ScoreRows {
  ScoreRows(int64_t max_keys, int64_t rows)
      : stride((max_keys + 2 * kKeyBlock + 15) / 16 * 16), buf(size_t(rows * stride + 16)), sums(size_t(rows)) {}
  float* data() { return buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) / 4) % 16) % 16; }
  int64_t stride;
  std::vector<float> buf, sums;
};

// The keys and values a work item of an f16 pool reads, widened: keys [from, to] of kv head g
// as one transposed block (HS, stride) and values as rows (stride, HS), so the f32 arithmetic
// runs on them unchanged (as a one-block sequence at position pos - from). A thread's next item
// of the same sequence, kv head and `from` (the next rows of a prompt) widens only the keys
// after the last one it holds.
struct WidenedKv {
  WidenedKv(int64_t max_keys, int64_t HS, int64_t G, int64_t R)
      : stride((max_keys + kLanes) / kLanes * kLanes), k(size_t(stride * HS)), v(k.size()), q(size_t(R * G * HS)) {}
  int64_t stride;
  std::vector<float> k, v, q;
  int64_t seq = -1, g = -1, from = -1, to = -1;  // what k and v hold: keys [from, to] (values from
  int64_t values_from = -1;                      // values_from) of sequence seq's kv head g
};

// ---- A decode step with few items for its team ----
// One sequence's decode row has an item per kv head, and one kv head on 2 threads left the second
// idle (1:0), 3 on 2 ran 2:1. With few items (split_items) the team splits every item instead, in
// three steps with a barrier after each: the scores by key blocks, the softmax by (item, head), the
// weighted values by (item, 16 or 32 columns). Each score, exponential, sum and output element
// gets the operations row_group gives it, in its order, so the result is row_group's bit for bit
// (PagedAttention.* compare the two). An f16 pool is read in place, each f16 vector widened in a
// register as it is loaded (F16C), with the arithmetic of the f16 item path (row_group on widened
// copies, the query rounded to f16).

struct DecodeItem {
  const PagedSeq* s;
  int64_t row, pos, base, g;  // output / query row, its position, row_group's score base, kv head
};

// The four 16-key chunks of the key block at kb (element i of lane l at ptr[c][i * block_size +
// l]); chunks past the item's last key repeat its last lane, as in row_group.
template <typename T>
void key_chunks(const T* (&ptr)[4], const T* k_pool, const DecodeItem& it, int64_t kb, const PagedAttentionDims& d) {
  const int64_t last_lane = it.pos / kLanes * kLanes, bs = d.block_size;
  for (int64_t c = 0; c < 4; ++c) {
    const int64_t key0 = std::min(kb + c * kLanes, last_lane);
    ptr[c] = k_pool + (int64_t(it.s->blocks[key0 / bs]) * d.NKV + it.g) * d.HS * bs + key0 % bs;
  }
}

// The chunks [c_lo, c_hi) of the key block at kb that an item's row scores.
inline std::pair<int64_t, int64_t> scored_chunks(const DecodeItem& it, int64_t kb, const PagedAttentionDims& d) {
  const int64_t lo = first_key(it.pos, d.window) / kLanes * kLanes;
  return {std::max<int64_t>(0, (lo - kb) / kLanes), std::min<int64_t>(4, (it.pos + 1 - kb + kLanes - 1) / kLanes)};
}

// row_group's scores of one row (R = 1) for the key block at kb, into sc (the item's G rows).
TP_FMA_CLONES void item_scores(float* sc, int64_t stride, const float* q, const float* k_pool, const DecodeItem& it,
                               int64_t kb, const PagedAttentionDims& d) {
  const int64_t HS = d.HS, G = d.NH / d.NKV;
  const float* ptr[4];
  key_chunks(ptr, k_pool, it, kb, d);
  const auto chunks = scored_chunks(it, kb, d);  // no structured binding: clang 14 cannot capture one
  const int64_t c_lo = chunks.first, c_hi = chunks.second;
  for_head_tiles(G, [&]<int H>(int64_t h0) TP_INLINE_LAMBDA {
    score_chunks<H>(sc + h0 * stride + (kb - it.base), stride, q + it.row * d.NH * HS + (it.g * G + h0) * HS, ptr,
                    HS, d.block_size, c_lo, c_hi);
  });
}

TP_FMA_CLONES float item_softmax(float* sc, int64_t n_keys, float scale) { return softmax_numerators(sc, n_keys, scale); }

// row_group's weighted values and normalisation of one row for columns [i0, i0 + w) of every
// head of the item.
TP_FMA_CLONES void item_values(float* out, const float* sc, int64_t stride, const float* v_pool, const DecodeItem& it,
                               int64_t i0, int64_t w, const float* sums, const PagedAttentionDims& d) {
  const int64_t HS = d.HS, G = d.NH / d.NKV, first = first_key(it.pos, d.window);
  const PagedValueRows<float> rows{v_pool, it.s->blocks, d.NKV * HS, d.block_size};
  float* o = out + it.row * d.NH * HS + it.g * G * HS + i0;
  for (int64_t kb = it.base; kb <= it.pos; kb += kKeyBlock) {
    const int64_t j0 = std::max(kb, first), j1 = std::min(kb + kKeyBlock, it.pos + 1);
    if (j0 >= j1) continue;
    for_head_tiles(G, [&]<int H>(int64_t h0) TP_INLINE_LAMBDA {
      weighted_values<H>(o + h0 * HS, HS, sc + h0 * stride - it.base, stride, rows, j0, j1, it.g * HS + i0, w);
    });
  }
  for (int64_t h = 0; h < G; ++h) {
    const float inv = 1.0f / sums[h];
    float* oh = o + h * HS;
#pragma omp simd
    for (int64_t i = 0; i < w; ++i) oh[i] *= inv;
  }
}

// The same two steps over an f16 pool with AVX2, FMA and F16C (cpu_has_avx2): the f32 kernels'
// fma chains in their order on the widened values, so bitwise the f16 item path's.
#if defined(__x86_64__)
TP_AVX2 inline __m256 widen8(const f16* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// score_pass over f16 chunks.
template <int H, int C>
TP_AVX2 inline void f16_score_pass(float* scores, int64_t stride, const float* q, const f16* const (&ptr)[4],
                                   int64_t HS, int64_t bs, int64_t c0, int64_t c_lo, int64_t c_hi) {
  __m256 acc[H][C][2];
  TP_UNROLL for (int h = 0; h < H; ++h)
    TP_UNROLL for (int c = 0; c < C; ++c) acc[h][c][0] = acc[h][c][1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < HS; ++i) {
    TP_UNROLL for (int c = 0; c < C; ++c) {
      const f16* kc = ptr[c0 + c] + i * bs;
      const __m256 k0 = widen8(kc), k1 = widen8(kc + 8);
      TP_UNROLL for (int h = 0; h < H; ++h) {
        const __m256 qi = _mm256_broadcast_ss(q + h * HS + i);
        acc[h][c][0] = _mm256_fmadd_ps(qi, k0, acc[h][c][0]);
        acc[h][c][1] = _mm256_fmadd_ps(qi, k1, acc[h][c][1]);
      }
    }
  }
  for (int64_t c = std::max(c0, c_lo); c < std::min<int64_t>(c0 + C, c_hi); ++c)
    for (int h = 0; h < H; ++h) {
      _mm256_storeu_ps(scores + h * stride + c * kLanes, acc[h][c - c0][0]);
      _mm256_storeu_ps(scores + h * stride + c * kLanes + 8, acc[h][c - c0][1]);
    }
}

template <int H>
TP_AVX2 inline void f16_score_chunks(float* scores, int64_t stride, const float* q, const f16* const (&ptr)[4],
                                     int64_t HS, int64_t bs, int64_t c_lo, int64_t c_hi) {
  constexpr int C = chunks_per_pass(H, kNarrowRegisters);
  for (int64_t c0 = c_lo / C * C; c0 < c_hi; c0 += C) f16_score_pass<H, C>(scores, stride, q, ptr, HS, bs, c0, c_lo, c_hi);
}

// weighted_values_in_registers over an f16 pool's value rows.
template <int H, int C>
TP_AVX2 inline void f16_values_pass(float* o, int64_t HS, const float* p, int64_t stride,
                                    const PagedValueRows<f16>& v, int64_t j0, int64_t j1, int64_t col) {
  __m256 a[H][C][2];
  TP_UNROLL for (int h = 0; h < H; ++h)
    TP_UNROLL for (int c = 0; c < C; ++c) {
      a[h][c][0] = _mm256_loadu_ps(o + h * HS + c * kLanes);
      a[h][c][1] = _mm256_loadu_ps(o + h * HS + c * kLanes + 8);
    }
  v.for_each(j0, j1, col, [&](int64_t j, const f16* vr) TP_AVX2 {
    TP_UNROLL for (int c = 0; c < C; ++c) {
      const __m256 v0 = widen8(vr + c * kLanes), v1 = widen8(vr + c * kLanes + 8);
      TP_UNROLL for (int h = 0; h < H; ++h) {
        const __m256 pj = _mm256_broadcast_ss(p + h * stride + j);
        a[h][c][0] = _mm256_fmadd_ps(pj, v0, a[h][c][0]);
        a[h][c][1] = _mm256_fmadd_ps(pj, v1, a[h][c][1]);
      }
    }
  });
  TP_UNROLL for (int h = 0; h < H; ++h)
    TP_UNROLL for (int c = 0; c < C; ++c) {
      _mm256_storeu_ps(o + h * HS + c * kLanes, a[h][c][0]);
      _mm256_storeu_ps(o + h * HS + c * kLanes + 8, a[h][c][1]);
    }
}

// w: 16 or 32 columns (the team's column units).
template <int H>
TP_AVX2 inline void f16_values(float* o, int64_t HS, const float* p, int64_t stride, const PagedValueRows<f16>& v,
                               int64_t j0, int64_t j1, int64_t col, int64_t w) {
  constexpr int C = columns_per_pass(H, kNarrowRegisters) >= 2 ? 2 : 1;
  if (w == 2 * kLanes && C == 2) return f16_values_pass<H, 2>(o, HS, p, stride, v, j0, j1, col);
  for (int64_t c0 = 0; c0 < w; c0 += kLanes) f16_values_pass<H, 1>(o + c0, HS, p, stride, v, j0, j1, col + c0);
}

TP_AVX2 void item_scores(float* sc, int64_t stride, const float* q, const f16* k_pool, const DecodeItem& it,
                         int64_t kb, const PagedAttentionDims& d) {
  const int64_t HS = d.HS, G = d.NH / d.NKV;
  const f16* ptr[4];
  key_chunks(ptr, k_pool, it, kb, d);
  const auto chunks = scored_chunks(it, kb, d);
  const int64_t c_lo = chunks.first, c_hi = chunks.second;
  // The lambdas carry the target themselves: a lambda is compiled for the baseline otherwise.
  for_head_tiles(G, [&]<int H>(int64_t h0) TP_AVX2 {
    f16_score_chunks<H>(sc + h0 * stride + (kb - it.base), stride, q + it.row * d.NH * HS + (it.g * G + h0) * HS,
                        ptr, HS, d.block_size, c_lo, c_hi);
  });
}

TP_AVX2 void item_values(float* out, const float* sc, int64_t stride, const f16* v_pool, const DecodeItem& it,
                         int64_t i0, int64_t w, const float* sums, const PagedAttentionDims& d) {
  const int64_t HS = d.HS, G = d.NH / d.NKV, first = first_key(it.pos, d.window);
  const PagedValueRows<f16> rows{v_pool, it.s->blocks, d.NKV * HS, d.block_size};
  float* o = out + it.row * d.NH * HS + it.g * G * HS + i0;
  for (int64_t kb = it.base; kb <= it.pos; kb += kKeyBlock) {
    const int64_t j0 = std::max(kb, first), j1 = std::min(kb + kKeyBlock, it.pos + 1);
    if (j0 >= j1) continue;
    for_head_tiles(G, [&]<int H>(int64_t h0) TP_AVX2 {
      f16_values<H>(o + h0 * HS, HS, sc + h0 * stride - it.base, stride, rows, j0, j1, it.g * HS + i0, w);
    });
  }
  for (int64_t h = 0; h < G; ++h) {
    const float inv = 1.0f / sums[h];
    float* oh = o + h * HS;
    for (int64_t i = 0; i < w; ++i) oh[i] *= inv;
  }
}
#endif

// Whether a call's items (all of them one row) are better split by the team (over an f16 pool,
// where the CPU has the AVX2 kernels above). An f32 pool's items are read in place whole or split,
// and split only where some thread would get none: with 3 kv heads on 2 threads (2:1) a decode
// step of SmolLM2-135M took longer split in 15 of 17 alternated `bench decode` pairs on a Zen 4
// EPYC (median 7%; docs/BENCHMARKS.md). An f16 pool's items widen their keys and values into copies first,
// which the split reads in place: it stays split with fewer items than twice the team (2:1
// whole was slower in 3 of 3 `generate` pairs there).
bool split_items(int64_t rows_per_group, int64_t items, const PagedAttentionDims& d, bool f16_pool) {
  const int team = omp_in_parallel() ? 1 : omp_get_max_threads();
#if defined(__x86_64__)
  const bool kernels = !f16_pool || quant_detail::cpu_has_avx2();
#else
  const bool kernels = !f16_pool;
#endif
  return kernels && rows_per_group == 1 && team > 1 && items < (f16_pool ? 2 : 1) * team &&
         d.block_size % kLanes == 0 && d.HS % kLanes == 0;
}

// q: the rows' queries (rounded to f16 for an f16 pool, as the item path rounds them).
template <typename T>
void decode_items_by_team(float* out, const float* q, const T* k_pool, const T* v_pool, std::span<const PagedSeq> seqs,
                          const WorkRows& w, const PagedAttentionDims& d) {
  const int64_t G = d.NH / d.NKV;
  std::vector<DecodeItem> items;
  std::vector<int64_t> first_unit{0};  // the items' key blocks, numbered one after another
  for (const WorkRows::Group& gr : w.groups) {
    const PagedSeq& s = seqs[size_t(gr.seq)];
    const int64_t pos = s.pos0 + gr.t0, base = first_key(pos, d.window) / kKeyBlock * kKeyBlock;
    for (int64_t g = 0; g < d.NKV; ++g) {
      items.push_back({&s, s.row_begin + gr.t0, pos, base, g});
      first_unit.push_back(first_unit.back() + (pos + 1 - base + kKeyBlock - 1) / kKeyBlock);
    }
  }
  const int64_t n_items = int64_t(items.size());
  ScoreRows scores(w.max_keys, n_items * G);  // the team's: item i's head h at row i G + h
  const int64_t cw = d.HS % (2 * kLanes) == 0 ? 2 * kLanes : kLanes, col_units = d.HS / cw;
  float* sc = scores.data();
  const int64_t stride = scores.stride;
#pragma omp parallel
  {
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < first_unit.back(); ++u) {
      const int64_t i = std::upper_bound(first_unit.begin(), first_unit.end(), u) - first_unit.begin() - 1;
      const DecodeItem& it = items[size_t(i)];
      const int64_t kb = it.base + (u - first_unit[size_t(i)]) * kKeyBlock;
      item_scores(sc + i * G * stride, stride, q, k_pool, it, kb, d);
    }
#pragma omp for schedule(static)
    for (int64_t u = 0; u < n_items * G; ++u) {
      const DecodeItem& it = items[size_t(u / G)];
      const int64_t first = first_key(it.pos, d.window);
      scores.sums[size_t(u)] = item_softmax(sc + u * stride + (first - it.base), it.pos + 1 - first, d.scale);
      float* o = out + it.row * d.NH * d.HS + (it.g * G + u % G) * d.HS;
      std::fill(o, o + d.HS, 0.0f);
    }
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < n_items * col_units; ++u) {
      const int64_t i = u / col_units;
      item_values(out, sc + i * G * stride, stride, v_pool, items[size_t(i)], u % col_units * cw, cw,
                  scores.sums.data() + i * G, d);
    }
  }
}

// Items (a group's kv head) handed to a thread at a time: one while there are few (a decode
// step has one row per sequence: in fours, one thread took every kv head of it), four in prefill.
int64_t item_chunk(int64_t items) { return items >= 64 ? 4 : 1; }

}  // namespace

void paged_attention_forward(float* out, const float* q, const float* k_pool, const float* v_pool,
                             std::span<const PagedSeq> seqs, const PagedAttentionDims& dims) {
  const PagedAttentionDims d = resolve(dims, seqs, "paged_attention_forward");
  const int64_t R = rows_per_group(seqs, d), G = d.NH / d.NKV;
  const WorkRows w = list_rows(seqs, R);
  const int64_t items = int64_t(w.groups.size()) * d.NKV, row_stride = d.NH * d.HS, chunk = item_chunk(items);
  const bool parallel = w.keys * d.NH * d.HS > kMinParallelWork;
  if (parallel && split_items(R, items, d, false)) return decode_items_by_team(out, q, k_pool, v_pool, seqs, w, d);
  parallel_if(parallel, [&] {
    ScoreRows scores(w.max_keys, R * G);
    const int64_t per_claim = chunk;  // a local: clang 14 crashes on a captured one in the clause
#pragma omp for schedule(dynamic, per_claim)
    for (int64_t it = 0; it < items; ++it) {
      const WorkRows::Group& gr = w.groups[size_t(it / d.NKV)];
      const PagedSeq& s = seqs[size_t(gr.seq)];
      const int64_t r = s.row_begin + gr.t0;
      row_group(out + r * row_stride, row_stride, q + r * row_stride, row_stride, k_pool, v_pool, s, gr.t0, gr.R,
                it % d.NKV, d, scores.data(), scores.stride, scores.sums.data());
    }
  });
}

void paged_attention_forward_f16(float* out, const float* q, const f16* k_pool, const f16* v_pool,
                                 std::span<const PagedSeq> seqs, const PagedAttentionDims& dims) {
  const PagedAttentionDims d = resolve(dims, seqs, "paged_attention_forward_f16");
  const int64_t R = rows_per_group(seqs, d);
  const WorkRows w = list_rows(seqs, R);
  const int64_t G = d.NH / d.NKV, HS = d.HS, bs = d.block_size, kv_stride = d.NKV * HS;
  const int64_t items = int64_t(w.groups.size()) * d.NKV, row_stride = d.NH * HS, chunk = item_chunk(items);
  const bool parallel = w.keys * d.NH * d.HS > kMinParallelWork;
  if (parallel && split_items(R, items, d, true)) {
    // The queries rounded to f16, as each item below rounds its own.
    int64_t rows = 0;
    for (const PagedSeq& s : seqs) rows = std::max(rows, s.row_begin + s.T);
    std::vector<float> q16(size_t(rows * row_stride));
    for (size_t i = 0; i < q16.size(); ++i) q16[i] = f16_to_f32(f32_to_f16(q[i]));
    return decode_items_by_team(out, q16.data(), k_pool, v_pool, seqs, w, d);
  }
  parallel_if(parallel, [&] {
    ScoreRows scores(w.max_keys, R * G);
    WidenedKv kv(w.max_keys, HS, G, R);
    const int32_t block0 = 0;
    // Items kv head major (the f32 kernel's are group major; the order decides only which thread
    // runs an item), so a thread's consecutive items are consecutive rows of one head.
    const int64_t n_groups = int64_t(w.groups.size());
    const int64_t per_claim = chunk;  // as in paged_attention_forward
#pragma omp for schedule(dynamic, per_claim)
    for (int64_t it = 0; it < items; ++it) {
      const WorkRows::Group& gr = w.groups[size_t(it % n_groups)];
      const PagedSeq& s = seqs[size_t(gr.seq)];
      const int64_t r = s.row_begin + gr.t0, pos_first = s.pos0 + gr.t0, pos = pos_first + gr.R - 1;
      const int64_t g = it / n_groups;
      // The keys the f32 kernel would score (from a key block boundary at or before the first
      // row's first key) and the values it would sum.
      const int64_t first = first_key(pos_first, d.window);
      const int64_t from = first / kKeyBlock * kKeyBlock;
      const bool reuse =
          kv.seq == gr.seq && kv.g == g && kv.from == from && kv.to < pos && kv.values_from <= first;
      const int64_t start = reuse ? kv.to + 1 : from;
      for (int64_t j = start; j <= pos;) {
        const int64_t blk = s.blocks[j / bs], off = j % bs, run = std::min(bs - off, pos + 1 - j);
        for (int64_t i = 0; i < HS; ++i)
          f16_to_f32_n(kv.k.data() + i * kv.stride + (j - from), k_pool + ((blk * d.NKV + g) * HS + i) * bs + off,
                       run);
        for (int64_t jj = std::max(j, first); jj < j + run; ++jj)
          f16_to_f32_n(kv.v.data() + (jj - from) * HS, v_pool + (blk * bs + off + (jj - j)) * kv_stride + g * HS, HS);
        j += run;
      }
      kv.seq = gr.seq, kv.g = g, kv.from = from, kv.to = pos, kv.values_from = reuse ? kv.values_from : first;
      for (int64_t t = 0; t < gr.R; ++t) {
        const float* qr = q + (r + t) * row_stride + g * G * HS;
        for (int64_t i = 0; i < G * HS; ++i) kv.q[size_t(t * G * HS + i)] = f16_to_f32(f32_to_f16(qr[i]));
      }
      PagedAttentionDims one = d;
      one.NH = G, one.NKV = 1, one.block_size = kv.stride;
      const PagedSeq widened{0, gr.R, pos_first - from, &block0, 1};
      row_group(out + r * row_stride + g * G * HS, row_stride, kv.q.data(), G * HS, kv.k.data(), kv.v.data(), widened,
                0, gr.R, 0, one, scores.data(), scores.stride, scores.sums.data());
    }
  });
}

void paged_attention_forward_naive(float* out, const float* q, const float* k_pool, const float* v_pool,
                                   std::span<const PagedSeq> seqs, const PagedAttentionDims& dims) {
  const PagedAttentionDims d = resolve(dims, seqs, "paged_attention_forward_naive");
  const int64_t kv_row = d.NKV * d.HS, q_row = d.NH * d.HS;
  for (const PagedSeq& s : seqs) {
    const int64_t n = s.pos0 + s.T;
    std::vector<float> k(static_cast<size_t>(std::max<int64_t>(1, n * kv_row))), v(k.size());
    for (int64_t p = 0; p < n; ++p) {
      const int64_t blk = s.blocks[p / d.block_size], off = p % d.block_size;
      const int64_t src = (blk * d.block_size + off) * kv_row;
      std::copy(v_pool + src, v_pool + src + kv_row, v.begin() + p * kv_row);
      for (int64_t h = 0; h < d.NKV; ++h)
        for (int64_t i = 0; i < d.HS; ++i)
          k[size_t(p * kv_row + h * d.HS + i)] = k_pool[((blk * d.NKV + h) * d.HS + i) * d.block_size + off];
    }
    AttentionDims a;
    a.B = 1, a.T = s.T, a.NH = d.NH, a.NKV = d.NKV, a.HS = d.HS, a.pos0 = s.pos0, a.T_kv = n, a.scale = d.scale;
    a.window = d.window;
    if (s.T > 0) attention_forward_naive(out + s.row_begin * q_row, nullptr, q + s.row_begin * q_row, k.data(), v.data(), a);
  }
}

void paged_attention_forward_f16_naive(float* out, const float* q, const f16* k_pool, const f16* v_pool,
                                       std::span<const PagedSeq> seqs, const PagedAttentionDims& dims) {
  // The f32 reference on the pools' values widened (scalar conversions) and the query rounded.
  const PagedAttentionDims d = resolve(dims, seqs, "paged_attention_forward_f16_naive");
  int64_t n_blocks = 0, rows = 0;
  for (const PagedSeq& s : seqs) {
    for (int64_t b = 0; b < s.n_blocks; ++b) n_blocks = std::max<int64_t>(n_blocks, s.blocks[b] + 1);
    rows = std::max(rows, s.row_begin + s.T);
  }
  const int64_t pool = n_blocks * d.block_size * d.NKV * d.HS;
  std::vector<float> k(size_t(std::max<int64_t>(1, pool))), v(k.size()), qr(size_t(std::max<int64_t>(1, rows * d.NH * d.HS)));
  for (int64_t i = 0; i < pool; ++i) k[size_t(i)] = f16_to_f32(k_pool[i]), v[size_t(i)] = f16_to_f32(v_pool[i]);
  for (int64_t i = 0; i < rows * d.NH * d.HS; ++i) qr[size_t(i)] = f16_to_f32(f32_to_f16(q[i]));
  paged_attention_forward_naive(out, qr.data(), k.data(), v.data(), seqs, d);
}

}  // namespace tensorpar

// Paged attention (see paged_attention.h): per (query row, kv head) work item, the heads of the
// group (in tiles of up to four, sharing each key and value load) score every key of the sequence
// through its block table, then softmax and sum in key order (two passes over stored scores, no
// online rescaling); the row stops at its own position (causal) and starts at the oldest key of
// its sliding window (if any), so no masked score enters any sum.
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/fast_math.h"

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
// keys read each key and value once per tile of heads instead of once per head.
constexpr int kHeadTile = 4;

// Scores of H heads (queries q + h * HS) over n keys starting at key `first` (a multiple of
// kLanes) of a sequence whose blocks hold transposed keys (HS, bs), bs a multiple of kLanes: 16
// keys per lane vector, four vectors side by side (independent fma chains, so the loop is not
// latency-bound). Each key's score is its own fma chain over i, whatever H is.
// scores[h * stride + j] is head h's score of key first + j.
template <int H>
TP_INLINE void scores_transposed(float* scores, int64_t stride, const float* q, const float* k_pool,
                              const int32_t* blocks, int64_t first, int64_t n, int64_t NKV, int64_t g, int64_t HS,
                              int64_t bs) {
  const int64_t n_chunks = (n + kLanes - 1) / kLanes;
  for (int64_t c0 = 0; c0 < n_chunks; c0 += 4) {
    const float* ptr[4];
    for (int64_t c = 0; c < 4; ++c) {
      const int64_t key0 = first + std::min(c0 + c, n_chunks - 1) * kLanes;  // unused slots repeat the last
      ptr[c] = k_pool + (int64_t(blocks[key0 / bs]) * NKV + g) * HS * bs + key0 % bs;
    }
    float acc[H][4][kLanes] = {};
    for (int64_t i = 0; i < HS; ++i) {
      for (int64_t c = 0; c < 4; ++c) {
        const float* kc = ptr[c] + i * bs;
        for (int h = 0; h < H; ++h) {
          const float qi = q[h * HS + i];
#pragma omp simd
          for (int64_t l = 0; l < kLanes; ++l) acc[h][c][l] = std::fma(qi, kc[l], acc[h][c][l]);
        }
      }
    }
    for (int64_t c = 0; c < 4 && c0 + c < n_chunks; ++c) {
      const int64_t key0 = (c0 + c) * kLanes;
      for (int h = 0; h < H; ++h)
        std::copy(acc[h][c], acc[h][c] + std::min(kLanes, n - key0), scores + h * stride + key0);
    }
  }
}

// The same scores for any block size (tests, short one-sequence caches): key by key.
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

// For each of H heads: o + h * HS (w values) = sum over keys [first, first + n) of
// p[h * stride + j - first] v_j[i0 .. i0 + w), each element its own fma chain in key order.
template <int H, int64_t W>
TP_INLINE void weighted_values(float* o, int64_t HS, const float* p, int64_t stride, const float* v_pool,
                            const int32_t* blocks, int64_t first, int64_t n, int64_t kv_stride, int64_t col,
                            int64_t bs, int64_t w) {
  float a[H][W] = {};
  for (int64_t j = first; j < first + n; ++j) {
    const float* vr = v_pool + (int64_t(blocks[j / bs]) * bs + j % bs) * kv_stride + col;
    for (int h = 0; h < H; ++h) {
      const float pj = p[h * stride + j - first];
      if (w == W) {
#pragma omp simd
        for (int64_t l = 0; l < W; ++l) a[h][l] = std::fma(pj, vr[l], a[h][l]);
      } else {
        for (int64_t l = 0; l < w; ++l) a[h][l] = std::fma(pj, vr[l], a[h][l]);
      }
    }
  }
  for (int h = 0; h < H; ++h) std::copy(a[h], a[h] + w, o + h * HS);
}

// H heads of kv head g, from head h0, for one query row: every score of the row first (and its
// max), then the exponentials and the weighted values in key order. Nothing depends on how keys
// are grouped into blocks, how rows are batched or how heads are tiled: each score and each
// output element is one fma chain in a fixed order. scores: H rows of `stride` floats (64-byte
// aligned, stride a multiple of 16) holding at least pos + 1 each.
template <int H>
TP_INLINE void head_tile(float* out, const float* q, const float* k_pool, const float* v_pool, const PagedSeq& s,
                      int64_t pos, int64_t g, int64_t h0, const PagedAttentionDims& d, float* scores,
                      int64_t stride) {
  const int64_t HS = d.HS, bs = d.block_size;
  const int64_t kv_stride = d.NKV * HS;  // between tokens of a block
  // Keys [first, pos] are seen (the sliding window's, or all); scoring starts at a lane boundary
  // at or before `first` so the transposed lanes stay whole, and the extra scores are unused.
  // Both depend on the position only, never on the batch.
  const int64_t first = d.window > 0 ? std::max<int64_t>(0, pos + 1 - d.window) : 0;
  const int64_t scored_from = first / kLanes * kLanes, n_keys = pos + 1 - first;
  const float* qr = q + h0 * HS;
  float* o = out + h0 * HS;
  if (bs % kLanes == 0)
    scores_transposed<H>(scores, stride, qr, k_pool, s.blocks, scored_from, pos + 1 - scored_from, d.NKV, g, HS, bs);
  else
    scores_any(scores, stride, H, qr, k_pool, s.blocks, scored_from, pos + 1 - scored_from, d.NKV, g, HS, bs);
  float* p = scores + (first - scored_from);
  float sum[H];
  for (int h = 0; h < H; ++h) {
    float* sc = p + h * stride;
    float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
    for (int64_t j = 0; j < n_keys; ++j) {
      sc[j] *= d.scale;
      m = std::max(m, sc[j]);
    }
    float total = 0.0f;
#pragma omp simd reduction(+ : total)
    for (int64_t j = 0; j < n_keys; ++j) {
      sc[j] = fast_exp(sc[j] - m);
      total += sc[j];
    }
    sum[h] = total;
  }
  for (int64_t i0 = 0; i0 < HS; i0 += 64)
    weighted_values<H, 64>(o + i0, HS, p, stride, v_pool, s.blocks, first, n_keys, kv_stride, g * HS + i0, bs,
                           std::min<int64_t>(64, HS - i0));
  for (int h = 0; h < H; ++h) {
    const float inv = 1.0f / sum[h];
    float* oh = o + h * HS;
#pragma omp simd
    for (int64_t i = 0; i < HS; ++i) oh[i] *= inv;
  }
}

// One query row, the G heads of kv head g, in tiles of up to kHeadTile heads.
TP_FMA_CLONES void row_group(float* out, const float* q, const float* k_pool, const float* v_pool,
                             const PagedSeq& s, int64_t pos, int64_t g, const PagedAttentionDims& d, float* scores,
                             int64_t stride) {
  const int64_t G = d.NH / d.NKV;
  for (int64_t h0 = g * G; h0 < (g + 1) * G; h0 += kHeadTile) {
    switch (std::min<int64_t>(kHeadTile, (g + 1) * G - h0)) {
      case 4: head_tile<4>(out, q, k_pool, v_pool, s, pos, g, h0, d, scores, stride); break;
      case 3: head_tile<3>(out, q, k_pool, v_pool, s, pos, g, h0, d, scores, stride); break;
      case 2: head_tile<2>(out, q, k_pool, v_pool, s, pos, g, h0, d, scores, stride); break;
      default: head_tile<1>(out, q, k_pool, v_pool, s, pos, g, h0, d, scores, stride); break;
    }
  }
}

// Work items (sequence row, kv head) of a call, listed once so the loop can be split evenly.
struct WorkRows {
  std::vector<std::pair<int32_t, int64_t>> rows;  // (sequence index, row within it)
  int64_t keys = 0, max_keys = 1;
};

WorkRows list_rows(std::span<const PagedSeq> seqs) {
  WorkRows w;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (int64_t t = 0; t < seqs[i].T; ++t) {
      w.rows.emplace_back(int32_t(i), t);
      w.keys += seqs[i].pos0 + t + 1;
      w.max_keys = std::max(w.max_keys, seqs[i].pos0 + t + 1);
    }
  return w;
}

// kHeadTile rows of scores, each 64-byte aligned, so no vector loop over one is ever peeled
// differently for another batch.
struct ScoreRows {
  explicit ScoreRows(int64_t max_keys)
      : stride((max_keys + 16 + 15) / 16 * 16), buf(size_t(kHeadTile * stride + 16)) {}
  float* data() { return buf.data() + (16 - (reinterpret_cast<uintptr_t>(buf.data()) / 4) % 16) % 16; }
  int64_t stride;
  std::vector<float> buf;
};

// The keys and values a work item of an f16 pool reads, widened: keys [from, pos] of kv head g
// as one transposed block (HS, stride) and values as rows (stride, HS), so the f32 arithmetic
// runs on them unchanged (as a one-block sequence at position pos - from). A thread's next item
// of the same sequence, kv head and `from` (the next row of a prompt) widens only the keys
// after the last one it holds.
struct WidenedKv {
  WidenedKv(int64_t max_keys, int64_t HS, int64_t G)
      : stride((max_keys + kLanes) / kLanes * kLanes), k(size_t(stride * HS)), v(k.size()), q(size_t(G * HS)) {}
  int64_t stride;
  std::vector<float> k, v, q;
  int64_t seq = -1, g = -1, from = -1, to = -1;  // what k and v hold: keys [from, to] (values from
  int64_t values_from = -1;                      // values_from) of sequence seq's kv head g
};

// Items (a row's kv head group) handed to a thread at a time: one while there are few (a decode
// step has one row per sequence: in fours, one thread took every kv head of it), four in prefill.
int64_t item_chunk(int64_t items) { return items >= 64 ? 4 : 1; }

}  // namespace

void paged_attention_forward(float* out, const float* q, const float* k_pool, const float* v_pool,
                             std::span<const PagedSeq> seqs, const PagedAttentionDims& dims) {
  const PagedAttentionDims d = resolve(dims, seqs, "paged_attention_forward");
  const WorkRows w = list_rows(seqs);
  const int64_t items = int64_t(w.rows.size()) * d.NKV, row_stride = d.NH * d.HS, chunk = item_chunk(items);
#pragma omp parallel if (w.keys * d.NH * d.HS > kMinParallelWork)
  {
    ScoreRows scores(w.max_keys);
#pragma omp for schedule(dynamic, chunk)
    for (int64_t it = 0; it < items; ++it) {
      const auto [si, t] = w.rows[size_t(it / d.NKV)];
      const PagedSeq& s = seqs[size_t(si)];
      const int64_t r = s.row_begin + t;
      row_group(out + r * row_stride, q + r * row_stride, k_pool, v_pool, s, s.pos0 + t, it % d.NKV, d,
                scores.data(), scores.stride);
    }
  }
}

void paged_attention_forward_f16(float* out, const float* q, const f16* k_pool, const f16* v_pool,
                                 std::span<const PagedSeq> seqs, const PagedAttentionDims& dims) {
  const PagedAttentionDims d = resolve(dims, seqs, "paged_attention_forward_f16");
  const WorkRows w = list_rows(seqs);
  const int64_t G = d.NH / d.NKV, HS = d.HS, bs = d.block_size, kv_stride = d.NKV * HS;
  const int64_t items = int64_t(w.rows.size()) * d.NKV, row_stride = d.NH * HS, chunk = item_chunk(items);
#pragma omp parallel if (w.keys * d.NH * d.HS > kMinParallelWork)
  {
    ScoreRows scores(w.max_keys);
    WidenedKv kv(w.max_keys, HS, G);
    const int32_t block0 = 0;
    // Items kv head major (the f32 kernel's are row major; the order decides only which thread
    // runs an item), so a thread's consecutive items are consecutive rows of one head.
    const int64_t n_rows = int64_t(w.rows.size());
#pragma omp for schedule(dynamic, chunk)
    for (int64_t it = 0; it < items; ++it) {
      const auto [si, t] = w.rows[size_t(it % n_rows)];
      const PagedSeq& s = seqs[size_t(si)];
      const int64_t r = s.row_begin + t, pos = s.pos0 + t, g = it / n_rows;
      // The keys the f32 kernel would score (from a lane boundary at or before the window's
      // first key) and the values it would sum.
      const int64_t first = d.window > 0 ? std::max<int64_t>(0, pos + 1 - d.window) : 0;
      const int64_t from = first / kLanes * kLanes;
      const bool reuse = kv.seq == si && kv.g == g && kv.from == from && kv.to < pos && kv.values_from <= first;
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
      kv.seq = si, kv.g = g, kv.from = from, kv.to = pos, kv.values_from = reuse ? kv.values_from : first;
      const float* qr = q + r * row_stride + g * G * HS;
      for (int64_t i = 0; i < G * HS; ++i) kv.q[size_t(i)] = f16_to_f32(f32_to_f16(qr[i]));
      PagedAttentionDims one = d;
      one.NH = G, one.NKV = 1, one.block_size = kv.stride;
      const PagedSeq widened{0, 1, pos - from, &block0, 1};
      row_group(out + r * row_stride + g * G * HS, kv.q.data(), kv.k.data(), kv.v.data(), widened, pos - from, 0,
                one, scores.data(), scores.stride);
    }
  }
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

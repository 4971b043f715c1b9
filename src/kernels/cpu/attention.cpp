// Causal GQA attention over a KV cache: the naive forward (one row at a time) beside a tiled one
// (query block x key block, online softmax); forward saves the row log-sum-exp, backward recomputes
// the probabilities from it, so no T x T buffer is ever stored: in one pass over each (sequence,
// kv head)'s key blocks when those items fill the team, else in two finer-grained passes (query
// rows for d_q, key rows for d_k/d_v); both deterministic, with the same bits.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <omp.h>

#include "core/error.h"
#include "kernels/cpu/fast_math.h"

namespace tensorpar {
namespace {

// Below this many elements of work a loop runs on the calling thread: waking a team costs
// more than it saves (decode steps, small test sizes).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

inline void axpy(float* y, float a, const float* x, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// Checks the sizes and fills in the defaults (T_kv, scale).
AttentionDims resolve(const AttentionDims& in, const char* where) {
  AttentionDims d = in;
  if (d.T_kv == 0) d.T_kv = d.pos0 + d.T;
  TP_CHECK(d.B >= 0 && d.T >= 0 && d.NH > 0 && d.NKV > 0 && d.HS > 0 && d.pos0 >= 0, "[", where,
           "] sizes: got B=", d.B, " T=", d.T, " NH=", d.NH, " NKV=", d.NKV, " HS=", d.HS,
           " pos0=", d.pos0, ", expected B, T, pos0 >= 0 and NH, NKV, HS > 0");
  TP_CHECK(d.NH % d.NKV == 0, "[", where, "] heads: got NH=", d.NH, " NKV=", d.NKV,
           ", expected NH a multiple of NKV");
  TP_CHECK(d.T_kv >= d.pos0 + d.T, "[", where, "] kv rows: got T_kv=", d.T_kv,
           ", expected >= pos0 + T = ", d.pos0 + d.T);
  TP_CHECK(d.window >= 0, "[", where, "] window: got ", d.window, ", expected >= 0 (0: no window)");
  if (d.scale == 0) d.scale = 1.0f / std::sqrt(static_cast<float>(d.HS));
  return d;
}

// The first key query t sees: 0, or the oldest inside the sliding window. It sees [first, pos0 + t].
inline int64_t first_key(const AttentionDims& d, int64_t t) {
  return d.window > 0 ? std::max<int64_t>(0, d.pos0 + t + 1 - d.window) : 0;
}

// One past the last query that sees key j: T, or the first query whose window has left j behind.
inline int64_t last_query_end(const AttentionDims& d, int64_t j) {
  return d.window > 0 ? std::min<int64_t>(d.T, std::max<int64_t>(0, j + d.window - d.pos0)) : d.T;
}

// D (B,NH,T) = d_out . out per query row: sum_j p_j dP_j, the softmax-backward correction.
std::vector<float> row_dot(const float* d_out, const float* out, const AttentionDims& d) {
  const int64_t T = d.T, NH = d.NH, HS = d.HS;
  std::vector<float> D(static_cast<size_t>(d.B * NH * T));
#pragma omp parallel for schedule(static) if (d.B * NH * T * HS > kMinParallelWork)
  for (int64_t r = 0; r < d.B * NH * T; ++r) {
    const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
    const int64_t off = (b * T + t) * NH * HS + h * HS;
    D[static_cast<size_t>(r)] = dot(d_out + off, out + off, HS);
  }
  return D;
}

}  // namespace

void attention_forward_naive(float* out, float* lse, const float* q, const float* k, const float* v,
                             const AttentionDims& dims) {
  const AttentionDims d = resolve(dims, "attention_forward_naive");
  const int64_t B = d.B, T = d.T, NH = d.NH, HS = d.HS, group = d.NH / d.NKV;
  const int64_t q_stride = NH * HS, kv_stride = d.NKV * HS;  // between consecutive tokens
  const int64_t rows = B * NH * T;
#pragma omp parallel if (B * NH * T * (d.pos0 + T) * HS > kMinParallelWork)
  {
    std::vector<float> p(static_cast<size_t>(d.pos0 + T));  // scores, then probabilities
#pragma omp for schedule(dynamic, 8)
    for (int64_t r = 0; r < rows; ++r) {
      // r = (b, h, t) with t fastest: consecutive rows share a head and its kv rows.
      const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
      const int64_t n_keys = d.pos0 + t + 1, j_first = first_key(d, t);
      const float* qr = q + (b * T + t) * q_stride + h * HS;            // (HS)
      const float* kb = k + b * d.T_kv * kv_stride + (h / group) * HS;  // (n_keys) rows
      const float* vb = v + b * d.T_kv * kv_stride + (h / group) * HS;
      float* o = out + (b * T + t) * q_stride + h * HS;  // (HS)
      float m = -std::numeric_limits<float>::infinity();
      for (int64_t j = j_first; j < n_keys; ++j) {
        const float s = dot(qr, kb + j * kv_stride, HS) * d.scale;
        p[static_cast<size_t>(j)] = s;
        m = std::max(m, s);
      }
      double sum = 0;
      for (int64_t j = j_first; j < n_keys; ++j) {
        const float e = std::exp(p[static_cast<size_t>(j)] - m);
        p[static_cast<size_t>(j)] = e;
        sum += e;
      }
      std::fill(o, o + HS, 0.0f);
      for (int64_t j = j_first; j < n_keys; ++j)
        axpy(o, p[static_cast<size_t>(j)], vb + j * kv_stride, HS);
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t i = 0; i < HS; ++i) o[i] *= inv;
      if (lse) lse[(b * NH + h) * T + t] = m + static_cast<float>(std::log(sum));
    }
  }
}

namespace {

constexpr int64_t kQueryBlock = 16;  // query tokens per work item
constexpr int64_t kKeyBlock = 64;    // keys per tile (scores of one row fit a few vector registers)
constexpr int64_t kRowBlock = 4;     // query rows scored together against one key tile
constexpr int64_t kSplitKeys = 256;  // keys per split when a single query block is split

// acc (HS) += sum_j p[j] * v[j * kv_stride + :] over j < n, each element summed in key order.
// The output is walked in chunks of 64, four vectors held in four local arrays (registers) with
// the keys inside: four independent fma chains per key (one chain waits on its own latency), and
// acc loaded and stored once per chunk instead of once per key; then chunks of 16, then the last
// HS % 16 elements.
inline void accumulate_pv(float* acc, const float* p, const float* v, int64_t n, int64_t kv_stride,
                          int64_t HS) {
  constexpr int64_t kW = 16;
  int64_t i0 = 0;
  for (; i0 + 4 * kW <= HS; i0 += 4 * kW) {
    alignas(64) float a0[kW], a1[kW], a2[kW], a3[kW];
#pragma omp simd
    for (int64_t x = 0; x < kW; ++x) {
      a0[x] = acc[i0 + x];
      a1[x] = acc[i0 + kW + x];
      a2[x] = acc[i0 + 2 * kW + x];
      a3[x] = acc[i0 + 3 * kW + x];
    }
    for (int64_t j = 0; j < n; ++j) {
      const float pj = p[j];
      const float* vj = v + j * kv_stride + i0;
#pragma omp simd
      for (int64_t x = 0; x < kW; ++x) {
        a0[x] += pj * vj[x];
        a1[x] += pj * vj[kW + x];
        a2[x] += pj * vj[2 * kW + x];
        a3[x] += pj * vj[3 * kW + x];
      }
    }
#pragma omp simd
    for (int64_t x = 0; x < kW; ++x) {
      acc[i0 + x] = a0[x];
      acc[i0 + kW + x] = a1[x];
      acc[i0 + 2 * kW + x] = a2[x];
      acc[i0 + 3 * kW + x] = a3[x];
    }
  }
  for (; i0 + kW <= HS; i0 += kW) {
    alignas(64) float a[kW];
#pragma omp simd
    for (int64_t x = 0; x < kW; ++x) a[x] = acc[i0 + x];
    for (int64_t j = 0; j < n; ++j) {
      const float pj = p[j];
      const float* vj = v + j * kv_stride + i0;
#pragma omp simd
      for (int64_t x = 0; x < kW; ++x) a[x] += pj * vj[x];
    }
#pragma omp simd
    for (int64_t x = 0; x < kW; ++x) acc[i0 + x] = a[x];
  }
  for (int64_t j = 0; j < n && i0 < HS; ++j)  // the last HS % 16 elements
    for (int64_t i = i0; i < HS; ++i) acc[i] += p[j] * v[j * kv_stride + i];
}

// One work item: queries [t0, t1) of sequence b, all query heads of kv head g, against keys
// [key_begin, key_end) (clipped to what the queries may see), in key tiles with an online
// softmax. Leaves per row r the running max m[r], sum l[r] and unnormalised output acc (r, HS);
// kt is (HS, kKeyBlock) scratch.
TP_VECTOR_CLONES void attention_tile(const float* q, const float* k, const float* v,
                                     const AttentionDims& d, int64_t b, int64_t g, int64_t t0,
                                     int64_t t1, int64_t key_begin, int64_t key_end, float* m,
                                     float* l, float* acc_all, float* kt) {
  const int64_t T = d.T, NH = d.NH, HS = d.HS, group = d.NH / d.NKV;
  const int64_t q_stride = NH * HS, kv_stride = d.NKV * HS;
  const int64_t rows = (t1 - t0) * group;  // row r: token t0 + r / group, head g*group + r % group
  const float* kb = k + b * d.T_kv * kv_stride + g * HS;
  const float* vb = v + b * d.T_kv * kv_stride + g * HS;
  std::fill(acc_all, acc_all + rows * HS, 0.0f);
  std::fill(m, m + rows, -std::numeric_limits<float>::infinity());
  std::fill(l, l + rows, 0.0f);
  const int64_t n_keys = std::min(key_end, d.pos0 + t1);  // the last query sees [0, pos0 + t1)
  // Keys before the first query's window are seen by no query of the block.
  for (int64_t j0 = std::max(key_begin, first_key(d, t0)); j0 < n_keys; j0 += kKeyBlock) {
    const int64_t jn = std::min(kKeyBlock, n_keys - j0);
    // Few rows (decode): score by dot products straight from the cache; the transpose would
    // cost more than it saves.
    const bool transpose = rows > kRowBlock;
    if (transpose)
      for (int64_t j = 0; j < jn; ++j)
        for (int64_t i = 0; i < HS; ++i) kt[i * kKeyBlock + j] = kb[(j0 + j) * kv_stride + i];
    // Scores for kRowBlock rows at a time: each load of the key tile feeds kRowBlock FMAs.
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      const int64_t rn = std::min(kRowBlock, rows - r0);
      alignas(64) float sc[kRowBlock][kKeyBlock];
      const float* qr[kRowBlock];
      for (int64_t x = 0; x < kRowBlock; ++x) {
        const int64_t r = r0 + std::min(x, rn - 1);  // pad a short block by repeating its last row
        const int64_t t = t0 + r / group, h = g * group + r % group;
        qr[x] = q + (b * T + t) * q_stride + h * HS;
#pragma omp simd
        for (int64_t j = 0; j < kKeyBlock; ++j) sc[x][j] = 0.0f;
      }
      if (transpose) {
        for (int64_t i = 0; i < HS; ++i) {
          const float* kti = kt + i * kKeyBlock;
          for (int64_t x = 0; x < kRowBlock; ++x) {
            const float qi = qr[x][i] * d.scale;
#pragma omp simd
            for (int64_t j = 0; j < kKeyBlock; ++j) sc[x][j] += qi * kti[j];
          }
        }
      } else {
        for (int64_t j = 0; j < jn; ++j)
          for (int64_t x = 0; x < rn; ++x)
            sc[x][j] = dot(qr[x], kb + (j0 + j) * kv_stride, HS) * d.scale;
      }
      for (int64_t x = 0; x < rn; ++x) {
        const int64_t r = r0 + x;
        const int64_t t = t0 + r / group;
        const int64_t valid = std::min(jn, d.pos0 + t + 1 - j0);  // causal limit within the tile
        const int64_t skip = std::max<int64_t>(0, first_key(d, t) - j0);  // keys left of the window
        if (valid <= skip) continue;
        float* s = sc[x] + skip;
        const int64_t n_seen = valid - skip;
        float mt = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mt)
        for (int64_t j = 0; j < n_seen; ++j) mt = s[j] > mt ? s[j] : mt;
        const float m_old = m[r];
        const float m_new = std::max(m_old, mt);
        const float alpha =
            fast_exp(m_old - m_new);  // rescales what was summed so far (0 at first)
        float sum = 0;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < n_seen; ++j) {
          s[j] = fast_exp(s[j] - m_new);
          sum += s[j];
        }
        l[r] = l[r] * alpha + sum;
        m[r] = m_new;
        float* acc = acc_all + r * HS;
#pragma omp simd
        for (int64_t i = 0; i < HS; ++i) acc[i] *= alpha;
        accumulate_pv(acc, s, vb + (j0 + skip) * kv_stride, n_seen, kv_stride, HS);
      }
    }
  }
}

// out and lse of the rows of one work item from its (m, l, acc).
void finalize_rows(float* out, float* lse, const AttentionDims& d, int64_t b, int64_t g, int64_t t0,
                   int64_t t1, const float* m, const float* l, const float* acc_all) {
  const int64_t T = d.T, NH = d.NH, HS = d.HS, group = d.NH / d.NKV;
  for (int64_t r = 0; r < (t1 - t0) * group; ++r) {
    const int64_t t = t0 + r / group, h = g * group + r % group;
    const float inv = 1.0f / l[r];
    float* o = out + (b * T + t) * NH * HS + h * HS;
    const float* acc = acc_all + r * HS;
    for (int64_t i = 0; i < HS; ++i) o[i] = acc[i] * inv;
    if (lse) lse[(b * NH + h) * T + t] = m[r] + std::log(l[r]);
  }
}

}  // namespace

void attention_forward(float* out, float* lse, const float* q, const float* k, const float* v,
                       const AttentionDims& dims) {
  const AttentionDims d = resolve(dims, "attention_forward");
  const int64_t group = d.NH / d.NKV, HS = d.HS;
  const int64_t n_qblocks = (d.T + kQueryBlock - 1) / kQueryBlock;
  const int64_t max_rows = kQueryBlock * group;
  // Decode and short chunks (one query block) over a long cache would give only B * NKV work
  // items: the keys are split too (flash-decoding) and the partial softmaxes merged. The split
  // depends on the sizes only, never on the thread count, so results do not either.
  const int64_t n_keys = d.pos0 + d.T;
  const int64_t n_splits =
      n_qblocks == 1 && n_keys >= 2 * kSplitKeys ? (n_keys + kSplitKeys - 1) / kSplitKeys : 1;
  const int64_t items = d.B * d.NKV * n_qblocks * n_splits;
  // Partial states of the splits: (items, max_rows) for m and l, (items, max_rows, HS) for acc.
  std::vector<float> part_m, part_l, part_acc;
  if (n_splits > 1) {
    part_m.resize(static_cast<size_t>(items * max_rows));
    part_l.resize(static_cast<size_t>(items * max_rows));
    part_acc.resize(static_cast<size_t>(items * max_rows * HS));
  }
#pragma omp parallel if (d.B * d.NH * d.T * n_keys * HS > kMinParallelWork)
  {
    std::vector<float> kt(static_cast<size_t>(HS * kKeyBlock));
    std::vector<float> acc(static_cast<size_t>(max_rows * HS)), m(static_cast<size_t>(max_rows)),
        l(static_cast<size_t>(max_rows));
    // Later query blocks see more keys: dynamic scheduling, the costliest blocks first.
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < items; ++it) {
      const int64_t split = it % n_splits, rest = it / n_splits;
      const int64_t qb = n_qblocks - 1 - rest % n_qblocks, g = (rest / n_qblocks) % d.NKV,
                    b = rest / (n_qblocks * d.NKV);
      const int64_t t0 = qb * kQueryBlock, t1 = std::min(d.T, t0 + kQueryBlock);
      if (n_splits == 1) {
        attention_tile(q, k, v, d, b, g, t0, t1, 0, n_keys, m.data(), l.data(), acc.data(),
                       kt.data());
        finalize_rows(out, lse, d, b, g, t0, t1, m.data(), l.data(), acc.data());
      } else {
        attention_tile(q, k, v, d, b, g, t0, t1, split * kSplitKeys, (split + 1) * kSplitKeys,
                       part_m.data() + it * max_rows, part_l.data() + it * max_rows,
                       part_acc.data() + it * max_rows * HS, kt.data());
      }
    }
    if (n_splits > 1) {
      // Merge the splits of each (sequence, kv head) in split order: rescale each partial
      // state to the common max.
#pragma omp for schedule(static)
      for (int64_t bg = 0; bg < d.B * d.NKV; ++bg) {
        const int64_t g = bg % d.NKV, b = bg / d.NKV, rows = d.T * group;
        const int64_t first = bg * n_splits;  // items of this (b, g) with n_qblocks == 1
        for (int64_t r = 0; r < rows; ++r) {
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t sp = 0; sp < n_splits; ++sp)
            mx = std::max(mx, part_m[static_cast<size_t>((first + sp) * max_rows + r)]);
          float sum = 0;
          float* a = acc.data() + r * HS;
          std::fill(a, a + HS, 0.0f);
          for (int64_t sp = 0; sp < n_splits; ++sp) {
            const int64_t idx = (first + sp) * max_rows + r;
            const float w = fast_exp(part_m[static_cast<size_t>(idx)] - mx);
            sum += part_l[static_cast<size_t>(idx)] * w;
            axpy(a, w, part_acc.data() + idx * HS, HS);
          }
          m[static_cast<size_t>(r)] = mx;
          l[static_cast<size_t>(r)] = sum;
        }
        finalize_rows(out, lse, d, b, g, 0, d.T, m.data(), l.data(), acc.data());
      }
    }
  }
}

void attention_backward_naive(float* d_q, float* d_k, float* d_v, const float* d_out,
                              const float* q, const float* k, const float* v, const float* out,
                              const float* lse, const AttentionDims& dims) {
  const AttentionDims d = resolve(dims, "attention_backward_naive");
  TP_CHECK(lse != nullptr,
           "[attention_backward_naive] lse: got nullptr, expected the (B,NH,T) "
           "log-sum-exp saved by attention_forward");
  const int64_t B = d.B, T = d.T, NH = d.NH, NKV = d.NKV, HS = d.HS, group = NH / NKV;
  const int64_t q_stride = NH * HS, kv_stride = NKV * HS;
  const float scale = d.scale;
  const std::vector<float> D = row_dot(d_out, out, d);
  // Pass 1, d_q: per query row, dS_j = p_j (dout . v_j - D), d_q += scale sum_j dS_j k_j.
  if (d_q) {
#pragma omp parallel for schedule(dynamic, 8) if (B * NH * T * (d.pos0 + T) * HS > kMinParallelWork)
    for (int64_t r = 0; r < B * NH * T; ++r) {
      const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
      const int64_t off = (b * T + t) * q_stride + h * HS;
      const float* kb = k + b * d.T_kv * kv_stride + (h / group) * HS;
      const float* vb = v + b * d.T_kv * kv_stride + (h / group) * HS;
      const float l = lse[r], Dr = D[static_cast<size_t>(r)];
      float* dq = d_q + off;
      for (int64_t j = first_key(d, t); j <= d.pos0 + t; ++j) {
        const float p = std::exp(dot(q + off, kb + j * kv_stride, HS) * scale - l);
        const float ds = p * (dot(d_out + off, vb + j * kv_stride, HS) - Dr);
        axpy(dq, scale * ds, kb + j * kv_stride, HS);
      }
    }
  }
  // Pass 2, d_k and d_v: per key row j of kv head g, over the group's query heads and the
  // queries that see it (t >= j - pos0).
  if (d_k || d_v) {
    const int64_t n_keys = d.pos0 + T;
    const int64_t rows = B * NKV * n_keys;
#pragma omp parallel if (B * NH * T * (d.pos0 + T) * HS > kMinParallelWork)
    {
      std::vector<float> acc_k(static_cast<size_t>(HS)), acc_v(static_cast<size_t>(HS));
#pragma omp for schedule(dynamic, 8)
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t j = r % n_keys, g = (r / n_keys) % NKV, b = r / (n_keys * NKV);
        const int64_t kv_off = (b * d.T_kv + j) * kv_stride + g * HS;
        const float* kj = k + kv_off;
        const float* vj = v + kv_off;
        std::fill(acc_k.begin(), acc_k.end(), 0.0f);
        std::fill(acc_v.begin(), acc_v.end(), 0.0f);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          for (int64_t t = std::max<int64_t>(0, j - d.pos0); t < last_query_end(d, j); ++t) {
            const int64_t off = (b * T + t) * q_stride + h * HS;
            const int64_t lr = (b * NH + h) * T + t;
            const float p = std::exp(dot(q + off, kj, HS) * scale - lse[lr]);
            axpy(acc_v.data(), p, d_out + off, HS);
            const float ds = p * (dot(d_out + off, vj, HS) - D[static_cast<size_t>(lr)]);
            axpy(acc_k.data(), scale * ds, q + off, HS);
          }
        }
        if (d_k) axpy(d_k + kv_off, 1.0f, acc_k.data(), HS);
        if (d_v) axpy(d_v + kv_off, 1.0f, acc_v.data(), HS);
      }
    }
  }
}

namespace {

// sc[x][j] = mult * sum_i a[x][i] * mt[i][j] for a block of kRowBlock rows and a key tile; mt is
// (HS, kKeyBlock), a key (or value) tile transposed.
inline void scores_block(float (*sc)[kKeyBlock], const float* const* a, float mult, const float* mt,
                         int64_t HS) {
  for (int64_t x = 0; x < kRowBlock; ++x)
#pragma omp simd
    for (int64_t j = 0; j < kKeyBlock; ++j) sc[x][j] = 0.0f;
  for (int64_t i = 0; i < HS; ++i) {
    const float* mti = mt + i * kKeyBlock;
    for (int64_t x = 0; x < kRowBlock; ++x) {
      const float ai = a[x][i] * mult;
#pragma omp simd
      for (int64_t j = 0; j < kKeyBlock; ++j) sc[x][j] += ai * mti[j];
    }
  }
}

// mt[i][j] += sum_x a[x][i] * w[x][j]: a gradient tile (HS, kKeyBlock) gathers kRowBlock rows.
inline void outer_block(float* mt, const float* const* a, const float (*w)[kKeyBlock], int64_t HS) {
  static_assert(kRowBlock == 4);
  for (int64_t i = 0; i < HS; ++i) {
    float* mti = mt + i * kKeyBlock;
    const float a0 = a[0][i], a1 = a[1][i], a2 = a[2][i], a3 = a[3][i];
#pragma omp simd
    for (int64_t j = 0; j < kKeyBlock; ++j)
      mti[j] += a0 * w[0][j] + a1 * w[1][j] + a2 * w[2][j] + a3 * w[3][j];
  }
}

// tile (HS, kKeyBlock) = rows [j0, j0 + jn) of src (rows kv_stride apart) transposed.
inline void transpose_tile(float* tile, const float* src, int64_t jn, int64_t kv_stride,
                           int64_t HS) {
  for (int64_t j = 0; j < jn; ++j)
    for (int64_t i = 0; i < HS; ++i) tile[i * kKeyBlock + j] = src[j * kv_stride + i];
}

struct BackwardScratch {
  std::vector<float> kt, vt, dkt, dvt;  // (HS, kKeyBlock) each
  std::vector<float> ds;                // (kKeyBlock)
};

// d_q of queries [t0, t1) of sequence b, all heads of kv group g.
TP_VECTOR_CLONES void attention_bwd_dq(float* d_q, const float* d_out, const float* q,
                                       const float* k, const float* v, const float* lse,
                                       const float* D, const AttentionDims& d, int64_t b, int64_t g,
                                       int64_t t0, int64_t t1, BackwardScratch& w) {
  const int64_t T = d.T, NH = d.NH, HS = d.HS, group = d.NH / d.NKV;
  const int64_t q_stride = NH * HS, kv_stride = d.NKV * HS;
  const int64_t rows = (t1 - t0) * group;
  const float* kb = k + b * d.T_kv * kv_stride + g * HS;
  const float* vb = v + b * d.T_kv * kv_stride + g * HS;
  const int64_t n_keys = d.pos0 + t1;
  for (int64_t j0 = first_key(d, t0); j0 < n_keys; j0 += kKeyBlock) {
    const int64_t jn = std::min(kKeyBlock, n_keys - j0);
    transpose_tile(w.kt.data(), kb + j0 * kv_stride, jn, kv_stride, HS);
    transpose_tile(w.vt.data(), vb + j0 * kv_stride, jn, kv_stride, HS);
    for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      const int64_t rn = std::min(kRowBlock, rows - r0);
      const float* qr[kRowBlock];
      const float* dor[kRowBlock];
      for (int64_t x = 0; x < kRowBlock; ++x) {
        const int64_t r = r0 + std::min(x, rn - 1);
        const int64_t off = (b * T + t0 + r / group) * q_stride + (g * group + r % group) * HS;
        qr[x] = q + off;
        dor[x] = d_out + off;
      }
      alignas(64) float S[kRowBlock][kKeyBlock], dP[kRowBlock][kKeyBlock];
      scores_block(S, qr, d.scale, w.kt.data(), HS);
      scores_block(dP, dor, 1.0f, w.vt.data(), HS);
      for (int64_t x = 0; x < rn; ++x) {
        const int64_t r = r0 + x, t = t0 + r / group, h = g * group + r % group;
        const int64_t valid = std::min(jn, d.pos0 + t + 1 - j0);
        const int64_t skip = std::max<int64_t>(0, first_key(d, t) - j0);  // left of the window
        if (valid <= skip) continue;
        const int64_t lr = (b * NH + h) * T + t;
        const float l = lse[lr], Dr = D[lr];
        float* ds = w.ds.data();
#pragma omp simd
        for (int64_t j = skip; j < valid; ++j)
          ds[j] = d.scale * fast_exp(S[x][j] - l) * (dP[x][j] - Dr);
        accumulate_pv(d_q + (b * T + t) * q_stride + h * HS, ds + skip, kb + (j0 + skip) * kv_stride,
                      valid - skip, kv_stride, HS);
      }
    }
  }
}

// d_k and d_v of keys [j0, j0 + jn) of sequence b, kv head g: over the queries that see them.
// With d_q (the single-pass backward, whose work item owns every query row of b and g and visits
// their key blocks in ascending order) it also adds each query row's d_q over these keys: the same
// terms, summed in the same key order, as attention_bwd_dq, so both passes give the same bits.
TP_VECTOR_CLONES void attention_bwd_dkv(float* d_q, float* d_k, float* d_v, const float* d_out, const float* q,
                                        const float* k, const float* v, const float* lse,
                                        const float* D, const AttentionDims& d, int64_t b,
                                        int64_t g, int64_t j0, int64_t jn, BackwardScratch& w) {
  const int64_t T = d.T, NH = d.NH, HS = d.HS, group = d.NH / d.NKV;
  const int64_t q_stride = NH * HS, kv_stride = d.NKV * HS;
  const int64_t kv_off = b * d.T_kv * kv_stride + g * HS;
  transpose_tile(w.kt.data(), k + kv_off + j0 * kv_stride, jn, kv_stride, HS);
  transpose_tile(w.vt.data(), v + kv_off + j0 * kv_stride, jn, kv_stride, HS);
  std::fill(w.dkt.begin(), w.dkt.end(), 0.0f);
  std::fill(w.dvt.begin(), w.dvt.end(), 0.0f);
  const int64_t t_begin = std::max<int64_t>(0, j0 - d.pos0);  // first query that sees key j0
  const int64_t t_end = std::max(t_begin, last_query_end(d, j0 + jn - 1));  // past the last that sees the block
  const int64_t rows = (t_end - t_begin) * group;
  for (int64_t r0 = 0; r0 < rows; r0 += kRowBlock) {
    const int64_t rn = std::min(kRowBlock, rows - r0);
    const float* qr[kRowBlock];
    const float* dor[kRowBlock];
    for (int64_t x = 0; x < kRowBlock; ++x) {
      const int64_t r = r0 + std::min(x, rn - 1);
      const int64_t off = (b * T + t_begin + r / group) * q_stride + (g * group + r % group) * HS;
      qr[x] = q + off;
      dor[x] = d_out + off;
    }
    alignas(64) float S[kRowBlock][kKeyBlock], dP[kRowBlock][kKeyBlock];
    alignas(64) float P[kRowBlock][kKeyBlock], dS[kRowBlock][kKeyBlock];
    scores_block(S, qr, d.scale, w.kt.data(), HS);
    scores_block(dP, dor, 1.0f, w.vt.data(), HS);
    for (int64_t x = 0; x < kRowBlock; ++x) {
      // Padding rows (x >= rn) and keys a row cannot see get zero weight.
      const int64_t r = r0 + x, t = t_begin + r / group, h = g * group + r % group;
      const int64_t valid = x < rn ? std::min(jn, d.pos0 + t + 1 - j0) : 0;
      const int64_t skip = x < rn ? first_key(d, t) - j0 : 0;  // keys left of the window
      const int64_t lr = x < rn ? (b * NH + h) * T + t : 0;
      const float l = lse[lr], Dr = D[lr];
#pragma omp simd
      for (int64_t j = 0; j < kKeyBlock; ++j) {
        const float p = j < valid && j >= skip ? fast_exp(S[x][j] - l) : 0.0f;
        P[x][j] = p;
        dS[x][j] = d.scale * p * (dP[x][j] - Dr);
      }
    }
    outer_block(w.dvt.data(), dor, P, HS);
    outer_block(w.dkt.data(), qr, dS, HS);
    if (d_q)
      for (int64_t x = 0; x < rn; ++x) {
        const int64_t r = r0 + x, t = t_begin + r / group, h = g * group + r % group;
        const int64_t valid = std::min(jn, d.pos0 + t + 1 - j0);
        const int64_t skip = std::max<int64_t>(0, first_key(d, t) - j0);
        if (valid <= skip) continue;
        accumulate_pv(d_q + (b * T + t) * q_stride + h * HS, dS[x] + skip, k + kv_off + (j0 + skip) * kv_stride,
                      valid - skip, kv_stride, HS);
      }
  }
  for (int64_t j = 0; j < jn; ++j) {
    float* dk = d_k ? d_k + kv_off + (j0 + j) * kv_stride : nullptr;
    float* dv = d_v ? d_v + kv_off + (j0 + j) * kv_stride : nullptr;
    for (int64_t i = 0; i < HS; ++i) {
      if (dk) dk[i] += w.dkt[static_cast<size_t>(i * kKeyBlock + j)];
      if (dv) dv[i] += w.dvt[static_cast<size_t>(i * kKeyBlock + j)];
    }
  }
}

}  // namespace

void attention_backward(float* d_q, float* d_k, float* d_v, const float* d_out, const float* q,
                        const float* k, const float* v, const float* out, const float* lse,
                        const AttentionDims& dims) {
  const AttentionDims d = resolve(dims, "attention_backward");
  TP_CHECK(lse != nullptr,
           "[attention_backward] lse: got nullptr, expected the (B,NH,T) "
           "log-sum-exp saved by attention_forward");
  const int64_t B = d.B, T = d.T, NH = d.NH, NKV = d.NKV, HS = d.HS;
  const bool parallel = B * NH * T * (d.pos0 + T) * HS > kMinParallelWork;
  const std::vector<float> D = row_dot(d_out, out, d);
  const int64_t n_qblocks = (T + kQueryBlock - 1) / kQueryBlock;
  const int64_t n_kblocks = (d.pos0 + T + kKeyBlock - 1) / kKeyBlock;
  // One pass when there are enough (sequence, kv head) items for the team: each item walks its
  // key blocks once and forms d_q, d_k and d_v from the same scores (5 block products per pair of
  // query and key blocks instead of 7). Else two passes split finer (query blocks for d_q, key
  // blocks for d_k and d_v), which score every pair twice. Both give the same bits.
  const bool single_pass = B * NKV >= 2 * int64_t(parallel ? omp_get_max_threads() : 1);
#pragma omp parallel if (parallel)
  {
    BackwardScratch w;
    for (auto* buf : {&w.kt, &w.vt, &w.dkt, &w.dvt})
      buf->resize(static_cast<size_t>(HS * kKeyBlock));
    w.ds.resize(static_cast<size_t>(kKeyBlock));
    if (single_pass) {
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < B * NKV; ++it)
        for (int64_t kb = 0; kb < n_kblocks; ++kb) {
          const int64_t j0 = kb * kKeyBlock;
          attention_bwd_dkv(d_q, d_k, d_v, d_out, q, k, v, lse, D.data(), d, it / NKV, it % NKV, j0,
                            std::min(kKeyBlock, d.pos0 + T - j0), w);
        }
    }
    if (d_q && !single_pass) {
      // Later query blocks see more keys: the costliest first.
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < B * NKV * n_qblocks; ++it) {
        const int64_t qb = n_qblocks - 1 - it % n_qblocks, g = (it / n_qblocks) % NKV,
                      b = it / (n_qblocks * NKV);
        attention_bwd_dq(d_q, d_out, q, k, v, lse, D.data(), d, b, g, qb * kQueryBlock,
                         std::min(T, (qb + 1) * kQueryBlock), w);
      }
    }
    if ((d_k || d_v) && !single_pass) {
      // Earlier key blocks are seen by more queries: the costliest first.
#pragma omp for schedule(dynamic, 1)
      for (int64_t it = 0; it < B * NKV * n_kblocks; ++it) {
        const int64_t kb = it % n_kblocks, g = (it / n_kblocks) % NKV, b = it / (n_kblocks * NKV);
        const int64_t j0 = kb * kKeyBlock;
        attention_bwd_dkv(nullptr, d_k, d_v, d_out, q, k, v, lse, D.data(), d, b, g, j0,
                          std::min(kKeyBlock, d.pos0 + T - j0), w);
      }
    }
  }
}

}  // namespace tensorpar

// Paged attention (see paged_attention.h): per (query row, kv head) work item, the heads of the
// group score every key of the sequence through its block table, then softmax and sum in key
// order (two passes over stored scores, no online rescaling); the
// row stops at its own position (causal), so no masked score enters any sum.
#include "kernels/cpu/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/attention.h"

namespace tensorpar {

namespace {

constexpr int64_t kMinParallelWork = int64_t(1) << 15;

PagedAttentionDims resolve(const PagedAttentionDims& in, std::span<const PagedSeq> seqs, const char* where) {
  PagedAttentionDims d = in;
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

inline float dot(const float* a, const float* b, int64_t n) {
  float s = 0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// One query row, the G heads of kv head g: every score of the row first (and its max), then the
// exponentials and the weighted values in key order. Nothing depends on how keys are grouped
// into blocks, so a row's result is the same for any block size and any batch. scores: scratch
// of at least pos + 1 floats.
void row_group(float* out, const float* q, const float* k_pool, const float* v_pool, const PagedSeq& s,
               int64_t pos, int64_t g, const PagedAttentionDims& d, float* scores) {
  const int64_t G = d.NH / d.NKV, HS = d.HS, bs = d.block_size;
  const int64_t kv_stride = d.NKV * HS;  // between tokens of a block
  const int64_t n_keys = pos + 1;
  auto key_row = [&](int64_t j) { return (int64_t(s.blocks[j / bs]) * bs + j % bs) * kv_stride + g * HS; };
  for (int64_t hh = 0; hh < G; ++hh) {
    const int64_t h = g * G + hh;
    const float* qr = q + h * HS;
    float* o = out + h * HS;
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < n_keys; ++j) {
      scores[j] = dot(qr, k_pool + key_row(j), HS) * d.scale;
      m = std::max(m, scores[j]);
    }
    std::fill(o, o + HS, 0.0f);
    float sum = 0.0f;
    for (int64_t j = 0; j < n_keys; ++j) {
      const float p = std::exp(scores[j] - m);
      sum += p;
      const float* vr = v_pool + key_row(j);
#pragma omp simd
      for (int64_t i = 0; i < HS; ++i) o[i] += p * vr[i];
    }
    const float inv = 1.0f / sum;
#pragma omp simd
    for (int64_t i = 0; i < HS; ++i) o[i] *= inv;
  }
}

}  // namespace

void paged_attention_forward(float* out, const float* q, const float* k_pool, const float* v_pool,
                             std::span<const PagedSeq> seqs, const PagedAttentionDims& dims) {
  const PagedAttentionDims d = resolve(dims, seqs, "paged_attention_forward");
  // Work items (sequence row, kv head), listed once so the loop can be split evenly.
  std::vector<std::pair<int32_t, int64_t>> rows;  // (sequence index, row within it)
  int64_t keys = 0, max_keys = 1;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (int64_t t = 0; t < seqs[i].T; ++t) {
      rows.emplace_back(int32_t(i), t);
      keys += seqs[i].pos0 + t + 1;
      max_keys = std::max(max_keys, seqs[i].pos0 + t + 1);
    }
  const int64_t items = int64_t(rows.size()) * d.NKV, row_stride = d.NH * d.HS;
#pragma omp parallel if (keys * d.NH * d.HS > kMinParallelWork)
  {
    std::vector<float> scores(static_cast<size_t>(max_keys));
#pragma omp for schedule(dynamic, 4)
    for (int64_t it = 0; it < items; ++it) {
      const auto [si, t] = rows[size_t(it / d.NKV)];
      const PagedSeq& s = seqs[size_t(si)];
      const int64_t r = s.row_begin + t;
      row_group(out + r * row_stride, q + r * row_stride, k_pool, v_pool, s, s.pos0 + t, it % d.NKV, d,
                scores.data());
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
      const int64_t src = (int64_t(s.blocks[p / d.block_size]) * d.block_size + p % d.block_size) * kv_row;
      std::copy(k_pool + src, k_pool + src + kv_row, k.begin() + p * kv_row);
      std::copy(v_pool + src, v_pool + src + kv_row, v.begin() + p * kv_row);
    }
    AttentionDims a;
    a.B = 1, a.T = s.T, a.NH = d.NH, a.NKV = d.NKV, a.HS = d.HS, a.pos0 = s.pos0, a.T_kv = n, a.scale = d.scale;
    if (s.T > 0) attention_forward_naive(out + s.row_begin * q_row, nullptr, q + s.row_begin * q_row, k.data(), v.data(), a);
  }
}

}  // namespace tensorpar

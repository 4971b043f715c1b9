// ParallelAttention (see parallel_attention.h). Layout per rank: the fused projection's row is
// [q (NH_local, HS) | k (NKV_local, HS) | v (NKV_local, HS)]; the attention kernels read kv head
// h / group for local query head h because whole groups (or one replicated kv head with a subset
// of its query heads) live here.
#include "parallel/parallel_attention.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/rmsnorm.h"
#include "parallel/mappings.h"
#include "parallel/rng.h"

namespace tensorpar {

namespace {

Range scaled(Range r, int64_t f) { return {r.begin * f, r.end * f}; }

std::vector<ColumnPart> qkv_parts(const AttentionShape& s, int tp_size) {
  ColumnPart q{s.n_heads * s.head_dim, {}}, kv{s.n_kv_heads * s.head_dim, {}};
  for (int r = 0; r < tp_size; ++r) {
    const HeadRange h = partition_heads(s.n_heads, s.n_kv_heads, tp_size, r);
    q.ranges.push_back(scaled(h.q, s.head_dim));
    kv.ranges.push_back(scaled(h.kv, s.head_dim));
  }
  return {q, kv, kv};
}

// dst (rows, cols) at dst_stride = src's columns at src_stride (rows apart).
void copy_columns(float* dst, int64_t dst_stride, const float* src, int64_t src_stride, int64_t rows,
                  int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * dst_stride, src + r * src_stride, size_t(cols) * sizeof(float));
}

}  // namespace

std::vector<Range> attention_o_ranges(const AttentionShape& s, int tp_size) {
  std::vector<Range> r;
  for (int i = 0; i < tp_size; ++i)
    r.push_back(scaled(partition_heads(s.n_heads, s.n_kv_heads, tp_size, i).q, s.head_dim));
  return r;
}

ParallelAttention::ParallelAttention(const AttentionShape& shape, const RopeTable* rope, int tp_size,
                                     int tp_rank)
    : shape_(shape),
      rope_(rope),
      heads_(partition_heads(shape.n_heads, shape.n_kv_heads, tp_size, tp_rank)),
      qkv_(shape.hidden, qkv_parts(shape, tp_size), shape.qkv_bias, tp_rank),
      o_(shape.n_heads * shape.head_dim, shape.hidden, shape.out_bias, attention_o_ranges(shape, tp_size), tp_rank) {
  TP_CHECK(shape.head_dim > 0 && shape.hidden > 0, "[ParallelAttention] sizes: C ", shape.hidden, " HS ",
           shape.head_dim);
  TP_CHECK(!rope || rope->head_size == shape.head_dim, "[ParallelAttention] rope table head size ",
           rope ? rope->head_size : 0, ", expected ", shape.head_dim);
  TP_CHECK(shape.window >= 0 && shape.scale >= 0, "[ParallelAttention] window ", shape.window, ", scale ",
           shape.scale, ": expected >= 0");
  if (shape.qk_norm) {
    for (Tensor* w : {&q_norm_w_, &k_norm_w_}) {
      *w = Tensor::empty({shape.head_dim}, DType::kF32);
      w->fill(1.0f - shape.norm_weight_offset);  // a multiplier of 1
    }
  }
}

// The multiplier of a head norm: offset + weight.
namespace {
std::vector<float> norm_multiplier(const Tensor& w, float offset) {
  std::vector<float> m(size_t(w.numel()));
  const float* p = w.data<float>();
  for (size_t i = 0; i < m.size(); ++i) m[i] = offset + p[i];
  return m;
}
}  // namespace

void ParallelAttention::head_norm_forward(float* out, float* rstd, const float* in, int64_t stride, const Tensor& w,
                                          int64_t N, int64_t n_heads) const {
  const int64_t HS = shape_.head_dim;
  const std::vector<float> m = norm_multiplier(w, shape_.norm_weight_offset);
  for (int64_t n = 0; n < N; ++n)  // a token's heads are contiguous: n_heads rows of HS
    rmsnorm_forward(out + n * n_heads * HS, rstd + n * n_heads, in + n * stride, m.data(), n_heads, HS,
                    shape_.norm_eps);
}

void ParallelAttention::head_norm_backward(float* d_in, float* d_weight, const float* d_out, const float* in,
                                           int64_t stride, const Tensor& w, const float* rstd, int64_t N,
                                           int64_t n_heads) const {
  const int64_t HS = shape_.head_dim;
  const std::vector<float> m = norm_multiplier(w, shape_.norm_weight_offset);
  for (int64_t n = 0; n < N; ++n)
    rmsnorm_backward(d_in + n * stride, d_weight, d_out + n * n_heads * HS, in + n * stride, m.data(),
                     rstd + n * n_heads, n_heads, HS);
}

int64_t ParallelAttention::weight_bytes() const {
  return qkv_.weight_bytes() + o_.weight().nbytes() + (o_.has_bias() ? o_.bias().nbytes() : 0) +
         (shape_.qk_norm ? q_norm_w_.nbytes() + k_norm_w_.nbytes() : 0);
}

void ParallelAttention::zero_grad() {
  qkv_.zero_grad();
  o_.zero_grad();
  for (Tensor* g : {&q_norm_g_, &k_norm_g_})
    if (g->numel() > 0) g->fill_zero();
}

void ParallelAttention::init_normal(float stddev, float o_stddev, uint64_t seed, const uint64_t ids[4]) {
  const uint64_t qkv_ids[3] = {ids[0], ids[1], ids[2]};
  qkv_.init_normal(stddev, seed, qkv_ids);
  o_.init_normal(o_stddev, seed, ids[3]);
}

void ParallelAttention::forward(MatmulEngine& eng, Tensor& out, const Tensor& x, const AttentionRows& rows,
                                AttentionActs& acts, Communicator& tp) const {
  forward_partial(eng, out, x, rows, acts);
  reduce_from_tp_region_forward(out, tp);
  o_.add_bias(out);
}

void ParallelAttention::forward_partial(MatmulEngine& eng, Tensor& out, const Tensor& x, const AttentionRows& rows,
                                        AttentionActs& acts) const {
  const int64_t N = x.dim(0), HS = shape_.head_dim, NHl = q_local(), NKVl = kv_local();
  const int64_t qc = NHl * HS, kc = NKVl * HS, W = qkv_.out_local();
  TP_CHECK(x.ndim() == 2 && x.dim(1) == shape_.hidden, "[ParallelAttention::forward] x ", x.describe(),
           ", expected (N, ", shape_.hidden, ")");
  TP_CHECK(rows.paged() || (rows.B * rows.T == N && rows.B >= 1), "[ParallelAttention::forward] dense rows: B ",
           rows.B, " x T ", rows.T, " for ", N, " rows");
  Tensor att = scratch_rows(acts.att, N, qc);
  if (NHl > 0) {
    Tensor qkv = scratch_rows(acts.qkv, N, W);
    qkv_.forward(eng, qkv, x);
    const float* src = qkv.data<float>();
    // q and k after RoPE, contiguous; v read in place (paged) or copied (kept for backward).
    Tensor q = scratch_rows(acts.q, N, qc), k = scratch_rows(acts.k, N, kc);
    if (shape_.qk_norm) {  // per-head norms first, then RoPE in place
      head_norm_forward(q.data<float>(), scratch_rows(acts.q_rstd, N, NHl).data<float>(), src, W, q_norm_w_, N, NHl);
      head_norm_forward(k.data<float>(), scratch_rows(acts.k_rstd, N, NKVl).data<float>(), src + qc, W, k_norm_w_, N,
                        NKVl);
      if (rope_) {
        rope_forward(q.data<float>(), q.data<float>(), rows.positions, *rope_, N, NHl);
        rope_forward(k.data<float>(), k.data<float>(), rows.positions, *rope_, N, NKVl);
      }
    } else if (rope_) {
      rope_forward(q.data<float>(), src, rows.positions, *rope_, N, NHl, W);
      rope_forward(k.data<float>(), src + qc, rows.positions, *rope_, N, NKVl, W);
    } else {
      copy_columns(q.data<float>(), qc, src, W, N, qc);
      copy_columns(k.data<float>(), kc, src + qc, W, N, kc);
    }
    if (rows.paged()) {
      // Each row's key and value go to its slot: block blocks[pos / block_size], row pos %
      // block_size (keys transposed within the block, see paged_attention.h).
      const int64_t bs = rows.block_size;
      const bool f16_pool = rows.kv_dtype == DType::kF16;
      TP_CHECK(f16_pool || rows.kv_dtype == DType::kF32, "[ParallelAttention::forward] a KV pool of ",
               dtype_name(rows.kv_dtype), ": expected f32 or f16");
      for (const PagedSeq& s : rows.seqs)
        for (int64_t t = 0; t < s.T; ++t) {
          const int64_t pos = s.pos0 + t, r = s.row_begin + t;
          TP_CHECK(pos / bs < s.n_blocks, "[ParallelAttention::forward] position ", pos, " beyond the sequence's ",
                   s.n_blocks, " blocks");
          const int64_t blk = s.blocks[pos / bs], off = pos % bs;
          const float* vr = src + r * W + qc + kc;
          const float* kr = k.data<float>() + r * kc;
          if (f16_pool) {
            f32_to_f16_n(static_cast<f16*>(rows.v_pool) + (blk * bs + off) * kc, vr, kc);
            f16* kt = static_cast<f16*>(rows.k_pool) + blk * kc * bs + off;
            for (int64_t i = 0; i < kc; ++i) kt[i * bs] = f32_to_f16(kr[i]);
          } else {
            std::memcpy(static_cast<float*>(rows.v_pool) + (blk * bs + off) * kc, vr, size_t(kc) * sizeof(float));
            float* kt = static_cast<float*>(rows.k_pool) + blk * kc * bs + off;
            for (int64_t i = 0; i < kc; ++i) kt[i * bs] = kr[i];
          }
        }
      PagedAttentionDims d;
      d.NH = NHl, d.NKV = NKVl, d.HS = HS, d.block_size = bs, d.scale = shape_.scale, d.window = shape_.window;
      if (f16_pool)
        paged_attention_forward_f16(att.data<float>(), q.data<float>(), static_cast<const f16*>(rows.k_pool),
                                    static_cast<const f16*>(rows.v_pool), rows.seqs, d);
      else
        paged_attention_forward(att.data<float>(), q.data<float>(), static_cast<const float*>(rows.k_pool),
                                static_cast<const float*>(rows.v_pool), rows.seqs, d);
    } else {
      Tensor v = scratch_rows(acts.v, N, kc);
      copy_columns(v.data<float>(), kc, src + qc + kc, W, N, kc);
      ensure_f32(acts.lse, {rows.B, NHl, rows.T});
      AttentionDims d;
      d.B = rows.B, d.T = rows.T, d.NH = NHl, d.NKV = NKVl, d.HS = HS, d.pos0 = 0, d.T_kv = rows.T;
      d.scale = shape_.scale, d.window = shape_.window;
      attention_forward(att.data<float>(), acts.lse.data<float>(), q.data<float>(), k.data<float>(),
                        v.data<float>(), d);
    }
  }
  o_.forward_partial(eng, out, att);
}

void ParallelAttention::backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x,
                                 const AttentionRows& rows, const AttentionActs& acts, Communicator& tp,
                                 Communicator* kv_group, CommThread* async) {
  if (async == nullptr || tp.size() == 1) {
    backward_partial(eng, d_x, d_out, x, rows, acts, tp, kv_group);
    copy_to_tp_region_backward(d_x, tp);
    return;
  }
  TP_CHECK(async->size() == tp.size() && async->rank() == tp.rank(), "[ParallelAttention::backward] async: a ",
           async->size(), "-rank CommThread (rank ", async->rank(), ") for the ", tp.size(), "-rank ", tp.name(),
           " group (rank ", tp.rank(), ")");
  QueuedOp reduce(*async, [&d_x](Communicator& c) { copy_to_tp_region_backward(d_x, c); });
  backward_partial(eng, d_x, d_out, x, rows, acts, tp, kv_group, [&reduce] { reduce.start(); });
  reduce.finish();
}

void ParallelAttention::backward_partial(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x,
                                         const AttentionRows& rows, const AttentionActs& acts, Communicator& tp,
                                         Communicator* kv_group, const std::function<void()>& input_done) {
  const int64_t N = x.dim(0), HS = shape_.head_dim, NHl = q_local(), NKVl = kv_local(), C = shape_.hidden;
  const int64_t qc = NHl * HS, kc = NKVl * HS, W = qkv_.out_local();
  TP_CHECK(!rows.paged() && rows.B * rows.T == N, "[ParallelAttention::backward] needs the dense rows of a training "
           "forward: B ", rows.B, " x T ", rows.T, " for ", N, " rows");
  TP_CHECK(d_x.shape() == (Shape{N, C}) && d_out.shape() == (Shape{N, C}) && acts.att.ndim() == 2 &&
               acts.att.dim(0) >= N,
           "[ParallelAttention::backward] d_x ", d_x.describe(), " d_out ", d_out.describe(), " att ",
           acts.att.describe(), ", expected (", N, ", ", C, ")");
  const int copies = kv_copies();
  TP_CHECK(copies == 1 || NHl == 0 || (kv_group && kv_group->size() == copies), "[ParallelAttention::backward] kv heads ",
           range_str(heads_.kv), " are held by ", copies, " ranks: a kv_group of that size is needed");
  const Tensor att = acts.att.slice(0, 0, N);
  Tensor d_att = Tensor::zeros({N, qc}, DType::kF32);
  o_.backward(eng, &d_att, d_out, att);
  Tensor d_qkv = Tensor::zeros({N, W}, DType::kF32);
  // Each rank's heads give part of the Replicated q/k norm weights' gradient.
  Tensor step_q_norm_grad, step_k_norm_grad;
  if (shape_.qk_norm) {
    step_q_norm_grad = Tensor::zeros({HS}, DType::kF32);
    step_k_norm_grad = Tensor::zeros({HS}, DType::kF32);
  }
  if (NHl > 0) {
    Tensor d_q = Tensor::zeros({N, qc}, DType::kF32);
    Tensor d_k = Tensor::zeros({N, kc}, DType::kF32);
    Tensor d_v = Tensor::zeros({N, kc}, DType::kF32);
    AttentionDims d;
    d.B = rows.B, d.T = rows.T, d.NH = NHl, d.NKV = NKVl, d.HS = HS, d.pos0 = 0, d.T_kv = rows.T;
    d.scale = shape_.scale, d.window = shape_.window;
    attention_backward(d_q.data<float>(), d_k.data<float>(), d_v.data<float>(), d_att.data<float>(),
                       acts.q.data<float>(), acts.k.data<float>(), acts.v.data<float>(), att.data<float>(),
                       acts.lse.data<float>(), d);
    float* dst = d_qkv.data<float>();
    if (shape_.qk_norm) {
      // Back through RoPE (into the normed q, k), then the head norms into the fused gradient.
      // The norm weights' gradients of this step are summed over tp below.
      Tensor d_qn = Tensor::zeros({N, qc}, DType::kF32), d_kn = Tensor::zeros({N, kc}, DType::kF32);
      if (rope_) {
        rope_backward(d_qn.data<float>(), d_q.data<float>(), rows.positions, *rope_, N, NHl);
        rope_backward(d_kn.data<float>(), d_k.data<float>(), rows.positions, *rope_, N, NKVl);
      } else {
        d_qn = d_q, d_kn = d_k;
      }
      const float* src = acts.qkv.data<float>();
      head_norm_backward(dst, step_q_norm_grad.data<float>(), d_qn.data<float>(), src, W, q_norm_w_,
                         acts.q_rstd.data<float>(), N, NHl);
      head_norm_backward(dst + qc, step_k_norm_grad.data<float>(), d_kn.data<float>(), src + qc, W, k_norm_w_,
                         acts.k_rstd.data<float>(), N, NKVl);
    } else if (rope_) {  // d_pre = R^T d_post, accumulated into the zeroed fused gradient
      rope_backward(dst, d_q.data<float>(), rows.positions, *rope_, N, NHl, W);
      rope_backward(dst + qc, d_k.data<float>(), rows.positions, *rope_, N, NKVl, W);
    } else {
      copy_columns(dst, W, d_q.data<float>(), qc, N, qc);
      copy_columns(dst + qc, W, d_k.data<float>(), kc, N, kc);
    }
    copy_columns(dst + qc + kc, W, d_v.data<float>(), kc, N, kc);
  }
  if (shape_.qk_norm) {
    // The ranks' parts sum to the whole (with replicated kv heads, the copies' parts of one
    // head's k gradient sum to its gradient too), so one all-reduce over tp gives every rank it.
    tp.all_reduce(step_q_norm_grad);
    tp.all_reduce(step_k_norm_grad);
    for (auto [grad, step] : {std::pair{&q_norm_g_, &step_q_norm_grad}, std::pair{&k_norm_g_, &step_k_norm_grad}}) {
      ensure_grad(*grad, {HS});
      float* g = grad->data<float>();
      const float* s = step->data<float>();
      for (int64_t i = 0; i < HS; ++i) g[i] += s[i];
    }
  }
  d_x.fill_zero();
  if (input_done) {  // d_x first, then the weight gradient
    qkv_.backward_input(eng, d_x, d_qkv, x);
    input_done();
  }
  if (copies == 1 || NHl == 0) {
    if (input_done) qkv_.backward_weight(eng, d_qkv, x);
    else qkv_.backward_partial(eng, &d_x, d_qkv, x);
  } else {
    // This rank's query heads give only part of a replicated kv head's gradient: the input
    // gradient takes this rank's part (summed over tp below), the weight gradient the sum over
    // the copies (x is Replicated, so summing d_k and d_v first is the same).
    if (!input_done) qkv_.backward_input(eng, d_x, d_qkv, x);
    Tensor kv = Tensor::empty({N, 2 * kc}, DType::kF32);
    float* dst = d_qkv.data<float>();
    copy_columns(kv.data<float>(), 2 * kc, dst + qc, W, N, 2 * kc);
    kv_group->all_reduce(kv);
    copy_columns(dst + qc, W, kv.data<float>(), 2 * kc, N, 2 * kc);
    qkv_.backward_weight(eng, d_qkv, x);
    // The copies' k and v weight gradients are products of the same numbers, but in matmuls as
    // wide as each rank's own query heads, which may sum them in different orders: the first
    // copy's gradient becomes every copy's, so the replicated head stays one head, bitwise.
    const int64_t hidden = qkv_.d_weight().dim(1);
    kv_group->broadcast(qkv_.d_weight().data<float>() + qc * hidden, 2 * kc * hidden, DType::kF32, 0);
    if (shape_.qkv_bias) kv_group->broadcast(qkv_.d_bias().data<float>() + qc, 2 * kc, DType::kF32, 0);
  }
}

}  // namespace tensorpar

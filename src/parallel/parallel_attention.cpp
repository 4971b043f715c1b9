// ParallelAttention (see parallel_attention.h). Layout per rank: q (N, NH_local, HS), k and v
// (N, NKV_local, HS); the attention kernel reads kv head h / group for local query head h
// because whole groups (or one replicated kv head with a subset of its query heads) live here.
#include "parallel/parallel_attention.h"

#include <cstring>

#include "core/error.h"
#include "kernels/cpu/attention.h"
#include "parallel/mappings.h"
#include "parallel/rng.h"

namespace tensorpar {

namespace {

bool has(const Tensor& t) { return t.ndim() > 0; }  // a default Tensor is "defined" but empty

Range scaled(Range r, int64_t f) { return {r.begin * f, r.end * f}; }

void load_local(LocalLinear& l, const SliceLoader& w, const SliceLoader& b, Range rows, int64_t in,
                const char* what) {
  if (rows.empty()) {  // no heads here: nothing to read
    l.w = Tensor::zeros({0, in}, DType::kF32);
    l.b = b ? Tensor::zeros({0}, DType::kF32) : Tensor();
    return;
  }
  Tensor t = w(0, rows);
  TP_CHECK(t.shape() == (Shape{rows.size(), in}), "[ParallelAttention::load] ", what, " rows ",
           range_str(rows), ": got ", t.describe(), ", expected ", shape_str({rows.size(), in}));
  l.w = std::move(t);
  l.dw = Tensor();
  if (b) {
    Tensor bb = b(0, rows).to(DType::kF32);
    TP_CHECK(bb.shape() == (Shape{rows.size()}), "[ParallelAttention::load] ", what, " bias rows ",
             range_str(rows), ": got ", bb.describe());
    l.b = std::move(bb);
    l.db = Tensor();
  }
}

// out (N, rows) = x (N, C) W^T + b, skipping empty shards.
void project(MatmulEngine& eng, Tensor& out, const Tensor& x, const LocalLinear& l) {
  if (out.numel() == 0) return;
  matmul_forward(eng, out, x, l.w, has(l.b) && l.b.numel() > 0 ? &l.b : nullptr);
}

Tensor view2(float* p, int64_t rows, int64_t cols) { return Tensor::borrow(p, {rows, cols}, DType::kF32); }

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
      o_(shape.n_heads * shape.head_dim, shape.hidden, shape.out_bias, attention_o_ranges(shape, tp_size), tp_rank) {
  TP_CHECK(shape.head_dim > 0 && shape.hidden > 0, "[ParallelAttention] sizes: C ", shape.hidden, " HS ",
           shape.head_dim);
  TP_CHECK(!rope || rope->head_size == shape.head_dim, "[ParallelAttention] rope table head size ",
           rope ? rope->head_size : 0, ", expected ", shape.head_dim);
  if (!heads_.kv.empty()) {
    kv_copies_ = 0;
    for (int r = 0; r < tp_size; ++r)
      kv_copies_ += partition_heads(shape.n_heads, shape.n_kv_heads, tp_size, r).kv == heads_.kv;
  }
  const int64_t C = shape.hidden, HS = shape.head_dim;
  q_.w = Tensor::zeros({q_local() * HS, C}, DType::kF32);
  k_.w = Tensor::zeros({kv_local() * HS, C}, DType::kF32);
  v_.w = Tensor::zeros({kv_local() * HS, C}, DType::kF32);
  if (shape.qkv_bias) {
    q_.b = Tensor::zeros({q_local() * HS}, DType::kF32);
    k_.b = Tensor::zeros({kv_local() * HS}, DType::kF32);
    v_.b = Tensor::zeros({kv_local() * HS}, DType::kF32);
  }
}

int64_t ParallelAttention::weight_bytes() const {
  int64_t n = o_.weight().nbytes() + (has(o_.bias()) ? o_.bias().nbytes() : 0);
  for (const LocalLinear* l : {&q_, &k_, &v_}) n += l->w.nbytes() + (has(l->b) ? l->b.nbytes() : 0);
  return n;
}

void ParallelAttention::zero_grad() {
  for (LocalLinear* l : {&q_, &k_, &v_}) {
    if (l->dw.numel() > 0) l->dw.fill_zero();
    if (l->db.numel() > 0) l->db.fill_zero();
  }
  o_.zero_grad();
}

void ParallelAttention::load(const AttentionLoaders& src) {
  const int64_t HS = shape_.head_dim, C = shape_.hidden;
  TP_CHECK(bool(src.q_bias) == shape_.qkv_bias && bool(src.o_bias) == shape_.out_bias,
           "[ParallelAttention::load] bias loaders do not match the layer's biases");
  load_local(q_, src.q, src.q_bias, scaled(heads_.q, HS), C, "q_proj");
  load_local(k_, src.k, src.k_bias, scaled(heads_.kv, HS), C, "k_proj");
  load_local(v_, src.v, src.v_bias, scaled(heads_.kv, HS), C, "v_proj");
  o_.load(src.o, src.o_bias);
}

void ParallelAttention::init_normal(float stddev, float o_stddev, uint64_t seed, const uint64_t ids[4]) {
  const int64_t HS = shape_.head_dim, C = shape_.hidden;
  auto init = [&](LocalLinear& l, int64_t n_heads, Range heads, uint64_t id) {
    l.w = Tensor::empty({heads.size() * HS, C}, DType::kF32);
    init_normal_sliced(l.w, {n_heads * HS, C}, 0, scaled(heads, HS), stddev, seed, id);
    if (shape_.qkv_bias) l.b = Tensor::zeros({heads.size() * HS}, DType::kF32);
    l.dw = Tensor();
    l.db = Tensor();
  };
  init(q_, shape_.n_heads, heads_.q, ids[0]);
  init(k_, shape_.n_kv_heads, heads_.kv, ids[1]);
  init(v_, shape_.n_kv_heads, heads_.kv, ids[2]);
  o_.init_normal(o_stddev, seed, ids[3]);
}

void ParallelAttention::forward_paged(MatmulEngine& eng, Tensor& out, const Tensor& x, const int64_t* positions,
                                      std::span<const PagedSeq> seqs, float* k_pool, float* v_pool,
                                      int64_t block_size, const AttentionScratch& scratch, Communicator& tp) const {
  const int64_t N = x.dim(0), HS = shape_.head_dim, NHl = q_local(), NKVl = kv_local();
  TP_CHECK(x.ndim() == 2 && x.dim(1) == shape_.hidden, "[ParallelAttention::forward_paged] x ", x.describe(),
           ", expected (N, ", shape_.hidden, ")");
  if (NHl > 0) {
    Tensor q = view2(scratch.q, N, NHl * HS), k = view2(scratch.k, N, NKVl * HS), v = view2(scratch.v, N, NKVl * HS);
    project(eng, q, x, q_);
    project(eng, k, x, k_);
    project(eng, v, x, v_);
    if (rope_) {
      rope_forward(q.data<float>(), q.data<float>(), positions, *rope_, N, NHl);
      rope_forward(k.data<float>(), k.data<float>(), positions, *rope_, N, NKVl);
    }
    // Each row's key and value go to its slot: block blocks[pos / block_size], row pos % block_size
    // (keys transposed within the block, see paged_attention.h).
    const int64_t row = NKVl * HS;
    for (const PagedSeq& s : seqs)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t pos = s.pos0 + t, r = s.row_begin + t;
        TP_CHECK(pos / block_size < s.n_blocks, "[ParallelAttention::forward_paged] position ", pos,
                 " beyond the sequence's ", s.n_blocks, " blocks");
        const int64_t blk = s.blocks[pos / block_size], off = pos % block_size;
        std::memcpy(v_pool + (blk * block_size + off) * row, scratch.v + r * row, size_t(row) * sizeof(float));
        const float* kr = scratch.k + r * row;  // keys transposed within their block
        float* kt = k_pool + blk * row * block_size + off;
        for (int64_t i = 0; i < row; ++i) kt[i * block_size] = kr[i];
      }
    PagedAttentionDims d;
    d.NH = NHl, d.NKV = NKVl, d.HS = HS, d.block_size = block_size;
    paged_attention_forward(scratch.att, scratch.q, k_pool, v_pool, seqs, d);
  }
  Tensor att = view2(scratch.att, N, NHl * HS);
  o_.forward(eng, out, att, tp);
}

void ParallelAttention::forward_train(MatmulEngine& eng, Tensor& out, const Tensor& x, int64_t B, int64_t T,
                                      const int64_t* positions, AttentionActs& acts, Communicator& tp) const {
  const int64_t N = B * T, HS = shape_.head_dim, NHl = q_local(), NKVl = kv_local();
  TP_CHECK(x.ndim() == 2 && x.dim(0) == N && x.dim(1) == shape_.hidden, "[ParallelAttention::forward_train] x ",
           x.describe(), ", expected ", shape_str({N, shape_.hidden}));
  ensure_f32(acts.q, {N, NHl * HS});
  ensure_f32(acts.k, {N, NKVl * HS});
  ensure_f32(acts.v, {N, NKVl * HS});
  ensure_f32(acts.att, {N, NHl * HS});
  ensure_f32(acts.lse, {B, NHl, T});
  if (NHl > 0) {
    project(eng, acts.q, x, q_);
    project(eng, acts.k, x, k_);
    project(eng, acts.v, x, v_);
    if (rope_) {
      rope_forward(acts.q.data<float>(), acts.q.data<float>(), positions, *rope_, N, NHl);
      rope_forward(acts.k.data<float>(), acts.k.data<float>(), positions, *rope_, N, NKVl);
    }
    AttentionDims d;
    d.B = B, d.T = T, d.NH = NHl, d.NKV = NKVl, d.HS = HS, d.pos0 = 0, d.T_kv = T;
    attention_forward(acts.att.data<float>(), acts.lse.data<float>(), acts.q.data<float>(), acts.k.data<float>(),
                      acts.v.data<float>(), d);
  }
  o_.forward(eng, out, acts.att, tp);
}

void ParallelAttention::backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, int64_t B,
                                 int64_t T, const int64_t* positions, const AttentionActs& acts, Communicator& tp,
                                 Communicator* kv_group) {
  const int64_t N = B * T, HS = shape_.head_dim, NHl = q_local(), NKVl = kv_local(), C = shape_.hidden;
  TP_CHECK(d_x.shape() == (Shape{N, C}) && d_out.shape() == (Shape{N, C}) && acts.q.shape() == (Shape{N, NHl * HS}),
           "[ParallelAttention::backward] d_x ", d_x.describe(), " d_out ", d_out.describe(), " q ",
           acts.q.describe(), ", expected (", N, ", ", C, ")");
  for (LocalLinear* l : {&q_, &k_, &v_}) {
    ensure_grad(l->dw, l->w.shape());
    if (has(l->b)) ensure_grad(l->db, l->b.shape());
  }
  d_x.fill_zero();
  Tensor d_att = Tensor::zeros({N, NHl * HS}, DType::kF32);
  o_.backward(eng, &d_att, d_out, acts.att);
  if (NHl > 0) {
    Tensor d_q = Tensor::zeros({N, NHl * HS}, DType::kF32);
    Tensor d_k = Tensor::zeros({N, NKVl * HS}, DType::kF32);
    Tensor d_v = Tensor::zeros({N, NKVl * HS}, DType::kF32);
    AttentionDims d;
    d.B = B, d.T = T, d.NH = NHl, d.NKV = NKVl, d.HS = HS, d.pos0 = 0, d.T_kv = T;
    attention_backward(d_q.data<float>(), d_k.data<float>(), d_v.data<float>(), d_att.data<float>(),
                       acts.q.data<float>(), acts.k.data<float>(), acts.v.data<float>(), acts.att.data<float>(),
                       acts.lse.data<float>(), d);
    if (rope_) {  // d_pre = R^T d_post; rope_backward accumulates into a separate buffer
      Tensor pre_q = Tensor::zeros(d_q.shape(), DType::kF32), pre_k = Tensor::zeros(d_k.shape(), DType::kF32);
      rope_backward(pre_q.data<float>(), d_q.data<float>(), positions, *rope_, N, NHl);
      rope_backward(pre_k.data<float>(), d_k.data<float>(), positions, *rope_, N, NKVl);
      d_q = std::move(pre_q);
      d_k = std::move(pre_k);
    }
    auto grad = [&](LocalLinear& l, const Tensor& d_y, bool shared) {
      Tensor* db = has(l.b) ? &l.db : nullptr;
      if (!shared) return matmul_backward(eng, &d_x, &l.dw, db, d_y, x, l.w);
      // This rank's query heads give only part of a replicated kv head's gradient: sum this
      // call's part over the copies, then accumulate.
      Tensor dw = Tensor::zeros(l.w.shape(), DType::kF32);
      Tensor dbt = db ? Tensor::zeros(l.b.shape(), DType::kF32) : Tensor();
      matmul_backward(eng, &d_x, &dw, db ? &dbt : nullptr, d_y, x, l.w);
      kv_group->all_reduce(dw);
      const float* s = dw.data<float>();
      float* g = l.dw.data<float>();
      for (int64_t i = 0; i < dw.numel(); ++i) g[i] += s[i];
      if (db) {
        kv_group->all_reduce(dbt);
        for (int64_t i = 0; i < dbt.numel(); ++i) l.db.data<float>()[i] += dbt.data<float>()[i];
      }
    };
    const bool shared = kv_copies_ > 1;
    TP_CHECK(!shared || (kv_group && kv_group->size() == kv_copies_), "[ParallelAttention::backward] kv heads ",
             range_str(heads_.kv), " are held by ", kv_copies_, " ranks: a kv_group of that size is needed");
    grad(q_, d_q, false);
    grad(k_, d_k, shared);
    grad(v_, d_v, shared);
  } else if (kv_group && kv_group->size() > 1) {
    TP_CHECK(false, "[ParallelAttention::backward] a rank without heads must not be in a kv group");
  }
  copy_to_tp_region_backward(d_x, tp);
}

}  // namespace tensorpar

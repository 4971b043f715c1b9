// ParallelAttention: causal self-attention split over the TP group by whole KV groups
// (partition_heads): q/k/v projections column-parallel over this rank's heads, RoPE, GQA
// attention over a KV buffer (the cache at inference, the saved keys in training), o_proj
// row-parallel with its all-reduce. Input and output Replicated (N, C).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/rope.h"
#include "parallel/partition.h"
#include "parallel/row_parallel_linear.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

struct AttentionShape {
  int64_t hidden = 0;      // C
  int64_t n_heads = 0;     // NH
  int64_t n_kv_heads = 0;  // NKV
  int64_t head_dim = 0;    // HS
  bool qkv_bias = false;   // Qwen2, GPT-2
  bool out_bias = false;   // GPT-2
};

// A projection's rows held here (any weight dtype matmul_forward takes), with lazy f32 grads.
struct LocalLinear {
  Tensor w, b, dw, db;  // w (out_local, in); b (out_local) f32 or undefined
};

// Where every weight of the layer comes from: slices (dim, range) of the full [out, in] tensors.
struct AttentionLoaders {
  SliceLoader q, k, v, o;
  SliceLoader q_bias, k_bias, v_bias, o_bias;  // empty when the layer has none
};

// Inference scratch of at least N rows: q and att (N, NH_local*HS), k and v (N, NKV_local*HS).
struct AttentionScratch {
  float *q, *k, *v, *att;
};

// Saved for backward, (B*T, ...) rows: x is the caller's input (kept by the caller).
struct AttentionActs {
  Tensor q;    // (N, NH_local*HS) after RoPE
  Tensor k;    // (N, NKV_local*HS) after RoPE
  Tensor v;    // (N, NKV_local*HS)
  Tensor att;  // (N, NH_local*HS) attention output before o_proj
  Tensor lse;  // (B, NH_local, T)
};

class ParallelAttention {
 public:
  // rope: the model's table (outlives the layer), or null for no rotary embedding (GPT-2).
  ParallelAttention(const AttentionShape& shape, const RopeTable* rope, int tp_size, int tp_rank);

  const AttentionShape& shape() const { return shape_; }
  const HeadRange& heads() const { return heads_; }
  int64_t q_local() const { return heads_.q.size(); }    // query heads here
  int64_t kv_local() const { return heads_.kv.size(); }  // kv heads here (copies when tp > NKV)
  // Ranks holding a copy of each of this rank's kv heads (1 unless tp > NKV).
  int kv_copies() const { return kv_copies_; }

  LocalLinear& q() { return q_; }
  LocalLinear& k() { return k_; }
  LocalLinear& v() { return v_; }
  RowParallelLinear& o() { return o_; }
  const RowParallelLinear& o() const { return o_; }
  int64_t weight_bytes() const;
  void zero_grad();

  void load(const AttentionLoaders& src);
  // Weights N(0, stddev^2) (o_proj: o_stddev) drawn for the full matrices and sliced; biases 0.
  // ids: tensor ids of q, k, v, o (tensor_id_of(name)).
  void init_normal(float stddev, float o_stddev, uint64_t seed, const uint64_t ids[4]);

  // Inference for the rows of a batch of sequences (CausalLM::forward_batch): x (N, C) -> out
  // (N, C) Replicated. positions (N): each row's position; seqs: each sequence's rows and block
  // table; the new keys/values are written into this layer's pool blocks (k_pool
  // (blocks, NKV_local, HS, block_size), keys transposed within a block; v_pool (blocks,
  // block_size, NKV_local, HS)) before attention reads them.
  void forward_paged(MatmulEngine& eng, Tensor& out, const Tensor& x, const int64_t* positions,
                     std::span<const PagedSeq> seqs, float* k_pool, float* v_pool, int64_t block_size,
                     const AttentionScratch& scratch, Communicator& tp) const;
  // Training: x (B*T, C) for B sequences from position 0 -> out (B*T, C); fills acts (allocated
  // here on first use or shape change). positions (B*T).
  void forward_train(MatmulEngine& eng, Tensor& out, const Tensor& x, int64_t B, int64_t T,
                     const int64_t* positions, AttentionActs& acts, Communicator& tp) const;
  // d_x (B*T, C) is written: the all-reduced input gradient. Weight grads accumulate. When kv
  // heads are replicated (tp > NKV), kv_group (ranks sharing this rank's kv head) sums their
  // k/v gradients so every copy holds the full gradient; null otherwise.
  void backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, int64_t B,
                int64_t T, const int64_t* positions, const AttentionActs& acts, Communicator& tp,
                Communicator* kv_group);

 private:
  AttentionShape shape_;
  const RopeTable* rope_;
  HeadRange heads_;
  int kv_copies_ = 1;
  LocalLinear q_, k_, v_;
  RowParallelLinear o_;
};

// Rows per rank of the o_proj input (q heads x HS), tiling [0, NH*HS).
std::vector<Range> attention_o_ranges(const AttentionShape& s, int tp_size);

}  // namespace tensorpar

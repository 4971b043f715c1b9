// ParallelAttention: causal self-attention split over the TP group by whole KV groups
// (partition_heads). q, k and v are one column-parallel GEMM over this rank's heads (a
// ColumnParallelLinear of three parts; kv heads are replicated when tp > n_kv_heads), then RoPE,
// GQA attention, and o_proj row-parallel with its all-reduce. Input and output Replicated (N, C).
// Options for Gemma 3: per-head RMSNorm of q and k before RoPE (weights Replicated), a sliding
// window, a score scale other than 1/sqrt(HS).
// One forward serves inference (keys and values written into a paged pool, attention over each
// sequence's blocks) and training (B sequences from position 0, everything kept for backward).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/paged_attention.h"
#include "kernels/cpu/rope.h"
#include "parallel/column_parallel_linear.h"
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
  int64_t window = 0;      // sliding window (attention.h); 0: full causal attention
  float scale = 0;         // score scale; 0: 1/sqrt(HS)
  bool qk_norm = false;    // Gemma 3: RMSNorm over each head's HS dims of q and k
  float norm_eps = 1e-6f;  // of the q/k norms
  float norm_weight_offset = 0;  // of the q/k norms (see Norm)
};

// The parts of the fused q/k/v projection.
enum AttentionPart : int64_t { kPartQ = 0, kPartK = 1, kPartV = 2 };

// How the rows of one forward are grouped into sequences and where their keys and values live.
struct AttentionRows {
  const int64_t* positions = nullptr;  // (N) each row's position
  // Paged (inference): every row's key and value are written into this layer's pool (k_pool
  // (blocks, NKV_local, HS, block_size), keys transposed within a block; v_pool (blocks,
  // block_size, NKV_local, HS)) and each sequence attends over its own blocks.
  std::span<const PagedSeq> seqs;
  void* k_pool = nullptr;  // f32 or f16 elements (kv_dtype)
  void* v_pool = nullptr;
  DType kv_dtype = DType::kF32;
  int64_t block_size = 0;
  // Dense (training; k_pool null): B sequences of T rows each from position 0.
  int64_t B = 0, T = 0;
  bool paged() const { return k_pool != nullptr; }
};

// One forward's intermediates: kept for backward in training, scratch at inference (buffers
// only grow). N rows each.
struct AttentionActs {
  Tensor qkv;  // (N, (NH_local + 2 NKV_local) HS): the fused projection, before RoPE
  Tensor q;    // (N, NH_local*HS) after RoPE
  Tensor k;    // (N, NKV_local*HS) after RoPE (training; the pool holds them at inference)
  Tensor v;    // (N, NKV_local*HS) (training)
  Tensor att;  // (N, NH_local*HS) attention output before o_proj
  Tensor lse;  // (B, NH_local, T) (training)
  Tensor q_rstd, k_rstd;  // (N, NH_local) and (N, NKV_local): the q/k norms' (qk_norm only)
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
  int kv_copies() const { return qkv_.part_copies(kPartK); }

  ColumnParallelLinear& qkv() { return qkv_; }
  // The q and k norms' weights (HS) and gradients, Replicated (qk_norm only; else empty).
  Tensor& q_norm_weight() { return q_norm_w_; }
  Tensor& k_norm_weight() { return k_norm_w_; }
  Tensor& q_norm_grad() { return q_norm_g_; }
  Tensor& k_norm_grad() { return k_norm_g_; }
  RowParallelLinear& o() { return o_; }
  const RowParallelLinear& o() const { return o_; }
  int64_t weight_bytes() const;
  void zero_grad();

  // Weights N(0, stddev^2) (o_proj: o_stddev) drawn for the full matrices and sliced; biases 0.
  // ids: tensor ids of q, k, v, o (tensor_id_of(name)).
  void init_normal(float stddev, float o_stddev, uint64_t seed, const uint64_t ids[4]);

  // x (N, C) -> out (N, C) Replicated (see AttentionRows for the two kinds of rows).
  void forward(MatmulEngine& eng, Tensor& out, const Tensor& x, const AttentionRows& rows, AttentionActs& acts,
               Communicator& tp) const;
  // The same up to o_proj's Partial sum (N, C): no reduction, no bias (sequence parallel
  // reduce-scatters it instead; RowParallelLinear::add_bias after).
  void forward_partial(MatmulEngine& eng, Tensor& out, const Tensor& x, const AttentionRows& rows,
                       AttentionActs& acts) const;
  // Training (dense rows) only: d_x (N, C) is written, the all-reduced input gradient; weight
  // grads accumulate. When kv heads are replicated (tp > NKV), kv_group (the ranks sharing this
  // rank's kv head) sums their k/v gradients so every copy holds the full gradient; else null.
  // With `async` (a CommThread over tp) the all-reduce of d_x overlaps the q/k/v weight gradient.
  void backward(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x, const AttentionRows& rows,
                const AttentionActs& acts, Communicator& tp, Communicator* kv_group, CommThread* async = nullptr);
  // The same with d_x left Partial over tp (written, not accumulated): sequence parallel
  // reduce-scatters it. tp still sums the q/k norm weights' gradients. `input_done`, when given,
  // is called once d_x is complete, before the q/k/v weight gradient.
  void backward_partial(MatmulEngine& eng, Tensor& d_x, const Tensor& d_out, const Tensor& x,
                        const AttentionRows& rows, const AttentionActs& acts, Communicator& tp,
                        Communicator* kv_group, const std::function<void()>& input_done = {});

 private:
  // q (N, n_heads HS) at stride `stride` -> out (N, n_heads, HS) normalised per head (rstd (N,
  // n_heads)); and its backward into d_in (strided like the input; accumulates), d_weight too.
  void head_norm_forward(float* out, float* rstd, const float* in, int64_t stride, const Tensor& w, int64_t N,
                         int64_t n_heads) const;
  void head_norm_backward(float* d_in, float* d_weight, const float* d_out, const float* in, int64_t stride,
                          const Tensor& w, const float* rstd, int64_t N, int64_t n_heads) const;

  AttentionShape shape_;
  const RopeTable* rope_;
  HeadRange heads_;
  ColumnParallelLinear qkv_;
  RowParallelLinear o_;
  Tensor q_norm_w_, k_norm_w_, q_norm_g_, k_norm_g_;  // (HS) each, qk_norm only
};

// Rows per rank of the o_proj input (q heads x HS), tiling [0, NH*HS).
std::vector<Range> attention_o_ranges(const AttentionShape& s, int tp_size);

}  // namespace tensorpar

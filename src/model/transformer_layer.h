// TransformerLayer: one pre-norm decoder block, x_mid = x + attn(norm1(x)); out = x_mid +
// mlp(norm2(x_mid)) (the MLP a mixture of experts in an MoE layer, ParallelMoe) (Gemma 3 adds a norm after each: x + post_attn_norm(attn(...)), x_mid +
// post_mlp_norm(mlp(...))), built from src/parallel (ParallelAttention, ParallelMlp) with Replicated
// norms. Its one forward serves generation, serving and training alike: the AttentionRows say
// where keys and values go (a paged pool, or kept for backward), the LayerActs are what the
// forward writes (scratch at inference, saved activations in training); backward sits beside it.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "model/model_config.h"
#include "model/norm.h"
#include "parallel/parallel_attention.h"
#include "parallel/parallel_mlp.h"
#include "parallel/parallel_moe.h"

namespace tensorpar {

// What a layer's forward writes, N rows each (buffers only grow). Its input x is the caller's.
struct LayerActs {
  Tensor h1, mean1, rstd1, x_mid, h2, mean2, rstd2;  // (N, C) and (N)
  Tensor attn_out, rstd_post_attn, mlp_out, rstd_post_mlp;  // post norms only: their inputs, (N)
  AttentionActs attn;
  MlpActs mlp;
  MoeActs moe;
};

// Sequence parallelism (Megatron-SP, training): the block's input and output are this rank's
// rows (partition_even of the N = B*T rows), so norms and residual adds run on N/tp rows and
// keep N/tp rows for backward; the input of attention and of the MLP is all-gathered to N rows
// and their row-parallel outputs reduce-scattered back (in backward: the conjugates, the input
// gathered again rather than kept). The norms' weight gradients are summed over TP. These are
// the gathered (N, C) buffers, shared by every layer of a step (buffers only grow).
struct SequenceParallelScratch {
  int64_t rows = 0;  // N: the step's rows over the whole TP group
  Tensor full, full_grad, partial;
};

// Where a layer runs: the rank's matmul engine and TP group, and (training with kv heads
// replicated, tp > n_kv_heads) the ranks that share this rank's kv head.
// An MoE layer also needs: the EP group its tokens are dispatched over (null when every rank of
// the TP group holds the same tokens, see ParallelMoe) and, in backward, the auxiliary loss's
// gradient on each expert's router probability (empty: none) and the router z-loss's.
struct LayerContext {
  MatmulEngine& eng;
  Communicator& tp;
  Communicator* kv_group = nullptr;
  Communicator* ep_dispatch = nullptr;
  std::span<const float> moe_aux_dprob = {};
  float moe_z_dlse = 0;  // the router z-loss's d loss / d lse per unit of lse (ParallelMoe::backward)
  double moe_capacity_factor = 0;  // ParallelMoe::forward's (training; 0: dropless)
  SequenceParallelScratch* sequence_parallel = nullptr;  // non-null: sequence parallel (dense layers)
  // Non-null (a CommThread over tp): backward all-reduces (under sequence parallelism:
  // reduce-scatters) the attention's and a dense MLP's input gradient while their first linear
  // layer's weight gradient is computed. MoE layers keep it in line.
  CommThread* tp_async = nullptr;
};

// Bytes of the tensors (and MoE routing vectors) the acts hold.
int64_t activation_bytes(const LayerActs& acts);

class TransformerLayer {
 public:
  // layer: its index in the model (local or global in Gemma 3). rope: its RoPE table, null for
  // learned positions (GPT-2). ffn_ranges: the MLP split. experts: where this rank's experts are
  // (MoE layers, c.is_moe(layer)); quant_align: the experts' ffn split unit (mlp_ffn_ranges).
  TransformerLayer(const ModelConfig& c, int64_t layer, const RopeTable* rope, const std::vector<Range>& ffn_ranges,
                   int tp_size, int tp_rank, const ExpertSplit& experts = {}, int64_t quant_align = 32);

  Norm& norm1() { return norm1_; }
  Norm& norm2() { return norm2_; }
  bool has_post_norms() const { return post_attn_norm_.has_value(); }
  Norm& post_attn_norm() { return *post_attn_norm_; }  // has_post_norms() only
  Norm& post_mlp_norm() { return *post_mlp_norm_; }
  ParallelAttention& attn() { return attn_; }
  bool is_moe() const { return moe_.has_value(); }
  ParallelMlp& mlp() { return *mlp_; }  // a dense layer's (!is_moe())
  ParallelMoe& moe() { return *moe_; }  // an MoE layer's
  const ParallelAttention& attn() const { return attn_; }
  int64_t weight_bytes() const;

  // out (N, C) = the block applied to x (N, C); out may alias x. Collective over ctx.tp. Under
  // sequence parallelism x and out are this rank's rows of the rows' B*T.
  void forward(const LayerContext& ctx, Tensor& out, const Tensor& x, const AttentionRows& rows,
               LayerActs& acts) const;
  // d_x (N, C): on entry the gradient of the block's output, on return that of its input x
  // (the forward's, with the acts it wrote); d_h (N, C) is scratch. Weight grads accumulate.
  void backward(const LayerContext& ctx, Tensor& d_x, Tensor& d_h, const Tensor& x, const AttentionRows& rows,
                const LayerActs& acts);

 private:
  Norm norm1_, norm2_;
  std::optional<Norm> post_attn_norm_, post_mlp_norm_;  // Gemma 3
  ParallelAttention attn_;
  std::optional<ParallelMlp> mlp_;
  std::optional<ParallelMoe> moe_;

  // out = attention / the MLP or MoE block of h (both this rank's rows under sequence
  // parallelism, else all N); their backward (d_h written).
  void attention_forward(const LayerContext& ctx, Tensor& out, const Tensor& h, const AttentionRows& rows,
                         LayerActs& acts) const;
  void attention_backward(const LayerContext& ctx, Tensor& d_h, const Tensor& d_out, const Tensor& h,
                          const AttentionRows& rows, const LayerActs& acts);
  void ffn_forward(const LayerContext& ctx, Tensor& out, const Tensor& h, LayerActs& acts) const;
  void ffn_backward(const LayerContext& ctx, Tensor& d_h, const Tensor& d_out, const Tensor& h, const LayerActs& acts);
};

}  // namespace tensorpar

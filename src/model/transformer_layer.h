// TransformerLayer: one pre-norm decoder block, x_mid = x + attn(norm1(x)); out = x_mid +
// mlp(norm2(x_mid)) (Gemma 3 adds a norm after each: x + post_attn_norm(attn(...)), x_mid +
// post_mlp_norm(mlp(...))), built from src/parallel (ParallelAttention, ParallelMlp) with Replicated
// norms. Its one forward serves generation, serving and training alike: the AttentionRows say
// where keys and values go (a paged pool, or kept for backward), the LayerActs are what the
// forward writes (scratch at inference, saved activations in training); backward sits beside it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "model/model_config.h"
#include "model/norm.h"
#include "parallel/parallel_attention.h"
#include "parallel/parallel_mlp.h"

namespace tensorpar {

// What a layer's forward writes, N rows each (buffers only grow). Its input x is the caller's.
struct LayerActs {
  Tensor h1, mean1, rstd1, x_mid, h2, mean2, rstd2;  // (N, C) and (N)
  Tensor attn_out, rstd_post_attn, mlp_out, rstd_post_mlp;  // post norms only: their inputs, (N)
  AttentionActs attn;
  MlpActs mlp;
};

// Where a layer runs: the rank's matmul engine and TP group, and (training with kv heads
// replicated, tp > n_kv_heads) the ranks that share this rank's kv head.
struct LayerContext {
  MatmulEngine& eng;
  Communicator& tp;
  Communicator* kv_group = nullptr;
};

class TransformerLayer {
 public:
  // layer: its index in the model (local or global in Gemma 3). rope: its RoPE table, null for
  // learned positions (GPT-2). ffn_ranges: the MLP split.
  TransformerLayer(const ModelConfig& c, int64_t layer, const RopeTable* rope, const std::vector<Range>& ffn_ranges,
                   int tp_size, int tp_rank);

  Norm& norm1() { return norm1_; }
  Norm& norm2() { return norm2_; }
  bool has_post_norms() const { return post_attn_norm_.has_value(); }
  Norm& post_attn_norm() { return *post_attn_norm_; }  // has_post_norms() only
  Norm& post_mlp_norm() { return *post_mlp_norm_; }
  ParallelAttention& attn() { return attn_; }
  ParallelMlp& mlp() { return mlp_; }
  const ParallelAttention& attn() const { return attn_; }
  int64_t weight_bytes() const;

  // out (N, C) = the block applied to x (N, C); out may alias x. Collective over ctx.tp.
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
  ParallelMlp mlp_;
};

}  // namespace tensorpar

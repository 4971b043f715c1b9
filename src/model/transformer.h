// Transformer: the decoder-only model of every supported architecture as one rank's shard
// (implements CausalLM): a VocabParallelEmbedding, a stack of TransformerLayers, a final norm
// and an LM head column-parallel over the vocab (tied: the embedding's own vocab shard), logits
// left Sharded. A model may hold a sub-range of the layers, with or without the embedding and
// the head (a pipeline stage). The per-architecture parts (tensor names, layouts) live in
// arch_llama.cpp and arch_gpt2.cpp; training in transformer_train.cpp. docs/ARCHITECTURE.md
// follows a token through it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/comm_thread.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rope.h"
#include "model/causal_lm.h"
#include "model/norm.h"
#include "model/transformer_layer.h"
#include "model/weight_source.h"
#include "parallel/column_parallel_linear.h"
#include "parallel/vocab_parallel_embedding.h"

namespace tensorpar {

// The part of the model one rank holds along the layer axis: layers [first, last) (last -1: to
// the end), and whether the embedding and the final norm + LM head are here.
struct LayerSpan {
  int64_t first = 0, last = -1;
  bool embedding = true, head = true;
};

// The layer spans of n_stages stages over n_layers layers: the counts given (one per stage,
// summing to n_layers), or an even split with the earlier stages taking one more layer when it
// does not divide. The first stage holds the embedding, the last the final norm and LM head.
// Throws naming the counts when they do not fit (every stage needs at least one layer).
std::vector<LayerSpan> split_layers(int64_t n_layers, int n_stages, std::span<const int64_t> counts = {});

// Where rank tp_rank of a TP group of tp_size ranks holds its experts (throws on an EP size that
// the model or the group cannot take).
ExpertSplit expert_split_of(const ModelConfig& c, const ExpertParallel& ep, int tp_size, int tp_rank);

class Transformer final : public CausalLM {
 public:
  // Shapes and shards from the config; weights are zero until load_weights or init_weights.
  // quant_align: the ffn split is cut at multiples of it (32 keeps quantized columns whole).
  Transformer(const ModelConfig& config, Communicator& tp, int64_t quant_align = 32, LayerSpan span = {},
              ExpertParallel experts = {});
  ~Transformer() override;

  // Reads this rank's slices (names and layouts per architecture). Throws naming file/tensor.
  void load_weights(const WeightSource& src);
  // Fresh weights for training, the same at every TP size (init_normal_sliced): Linear
  // N(0, 0.02^2) (output projections scaled by 1/sqrt(2L), as GPT-2), embeddings N(0, 0.02^2),
  // norm weights 1, biases 0.
  void init_weights(uint64_t seed);

  const LayerSpan& span() const { return span_; }
  const ExpertSplit& expert_split() const { return expert_split_; }

  // ---- a pipeline stage's training (train/pipeline.h runs these under its schedule) ----
  // Forward of micro-batch `micro` through this span. tokens (B, T) i64 on every stage (they
  // give the rows' positions; the first stage embeds them); x_in (stage_rows(B*T), C) f32: the previous
  // stage's output (null on the first stage); targets (B, T): read by the last stage only. Not
  // the last stage: writes x_out (stage_rows, C) and returns 0; the last: returns the mean loss. with_grad
  // keeps the activations for stage_backward(micro). Collective over tp.
  float stage_forward(int64_t micro, const Tensor& tokens, const Tensor* x_in, const Tensor& targets, Tensor* x_out,
                      bool with_grad);
  // Backward of `micro` (after its stage_forward with grad): d_out (stage_rows, C) is the gradient of
  // this stage's output (null on the last stage, whose gradient starts at the loss, scaled by
  // loss_scale); writes d_in (stage_rows, C), the gradient of its input (not the first stage). Weight
  // gradients accumulate; the micro-batch's activations are released.
  void stage_backward(int64_t micro, const Tensor* d_out, float loss_scale, Tensor* d_in);
  // Rows of a micro-batch of N tokens that cross a stage boundary from this rank: N, or under
  // sequence parallelism this TP rank's share (partition_even), the stages' TP ranks paired.
  int64_t stage_rows(int64_t N) const;
  // Takes the released per-micro-batch activations of `owner`'s pool from now on instead of a
  // pool of its own, so that a pipeline stage's model chunks (interleaved schedule) hold as many
  // as are alive at once, not each chunk's own peak. Before any stage_forward of this model.
  void share_stage_states(Transformer& owner);
  // On a last stage without the embedding whose head is tied: the embedding shard it holds as
  // its LM head, as a parameter (the first stage's name). The pipeline steps it with the same
  // summed gradient as the first stage's copy, so the two stay equal. Empty elsewhere.
  std::vector<ParamShard> tied_head_copy();

  // CausalLM
  const ModelConfig& config() const override { return config_; }
  Communicator& tp() override { return tp_; }
  Range vocab_range() const override { return vocab_range_; }
  std::unique_ptr<KvPool> make_kv_pool(int64_t n_blocks, int64_t block_size) const override;
  int64_t kv_bytes_per_token() const override;
  void forward_batch(Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool) override;
  // forward_batch through this rank's span only (a pipeline stage at inference): hidden (N, C),
  // N = the chunks' tokens, is the previous stage's output on entry (a stage without the
  // embedding) and this stage's on return (a stage without the head); the stage with the head
  // writes logits_local as forward_batch does. pool: this stage's layers.
  void forward_stage(Tensor& hidden, Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool);
  float forward_backward(const Tensor& tokens, const Tensor& targets, float loss_scale) override;
  float forward_loss(const Tensor& tokens, const Tensor& targets) override;
  void set_train_compute(const TrainCompute& compute) override;
  void set_backward_hook(std::function<void(int64_t part)> hook) override { backward_hook_ = std::move(hook); }
  int64_t activation_bytes() const override;
  // Also keeps the dense layers' and the head's matrices in the layout this CPU's inference
  // kernels read (packed_weights.h: GGUF types row-packed while on, bf16/f16 in panels).
  void set_int8_activations(bool on) override;
  void set_kv_dtype(DType dtype) override;
  std::vector<ParamShard> parameters() override;
  void zero_grad() override;
  int64_t weight_bytes() const override;
  std::vector<std::vector<double>> expert_load() const override { return expert_load_; }

 private:
  struct Workspace;
  struct TrainState;
  struct TrainScratch;
  friend void load_llama(Transformer&, const WeightSource&);
  friend void load_gpt2(Transformer&, const WeightSource&);
  friend void load_gemma3(Transformer&, const WeightSource&);

  // Architecture-specific naming (arch_*.cpp). The names are HF's; GPT-2's fused Conv1D c_attn
  // is exposed as three [out, in] tensors "...attn.c_attn.{q,k,v}.weight/bias" and its other
  // Conv1D weights transposed to [out, in] (see arch_gpt2.cpp).
  std::vector<ParamShard> parameters_llama();
  std::vector<ParamShard> parameters_gpt2();
  std::vector<ParamShard> parameters_gemma3();
  void append_param(std::vector<ParamShard>& out, const std::string& name, Tensor& value, Tensor& grad,
                    Shape global, int dim, Range range, int copies = 1);
  // Sets grad_part = part on out[from, end).
  static void mark_grad_part(std::vector<ParamShard>& out, size_t from, int64_t part);
  // Calls the backward hook, if any, for `part`.
  void gradients_done(int64_t part) const {
    if (backward_hook_) backward_hook_(part);
  }
  // A Llama-like layer's projections under HF names (prefix p = "model.layers.<l>."), shared by
  // the llama and gemma3 parameter lists (arch_llama.cpp): q/k/v (+ biases), o, gate/up/down.
  void append_qkv_params(std::vector<ParamShard>& out, TransformerLayer& L, const std::string& p);
  void append_o_param(std::vector<ParamShard>& out, TransformerLayer& L, const std::string& p);
  void append_mlp_params(std::vector<ParamShard>& out, TransformerLayer& L, const std::string& p);
  // An untied LM head as HF's lm_head.weight (every family; nothing when tied; arch_llama.cpp).
  void append_lm_head_param(std::vector<ParamShard>& out);
  // An MoE layer's router, this rank's experts and the shared expert (arch_llama.cpp).
  void append_moe_params(std::vector<ParamShard>& out, TransformerLayer& L, const std::string& p);
  // The layer of global index l (held here: span().first <= l < last).
  TransformerLayer& layer(int64_t l) { return layers_[size_t(l - span_.first)]; }
  void check_whole_model(const char* where) const;
  // forward_batch / forward_stage: hidden null for the whole model.
  void run_batch(Tensor* hidden, Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool);

  // x (N, C) = embedding rows of ids (all-reduced over tp) (+ learned positions for GPT-2;
  // times sqrt(C) for Gemma).
  void embed(Tensor& x, const int64_t* ids, const int64_t* positions, int64_t N) const;
  // The embedding's backward: d_x (N, C), the gradient of embed's output (scaled here for Gemma).
  void embed_backward(Tensor& d_x, const int64_t* ids, int64_t N);
  // Final logit soft-capping (Gemma): logits = cap tanh(logits / cap), and its backward on the
  // capped logits' gradient. No-ops without a cap.
  void softcap_logits(Tensor& logits) const;
  void softcap_logits_backward(Tensor& d_logits, const Tensor& capped_logits) const;
  // The LM head's weight: the embedding's shard when tied.
  const Tensor& head_weight() const;
  Tensor& head_grad();
  // Mean loss of tokens/targets (B, T); with_grad runs backward too.
  float train_step(const Tensor& tokens, const Tensor& targets, float loss_scale, bool with_grad);
  // The span's forward and backward over the activations `s` keeps (a whole model's step, or
  // one micro-batch of a pipeline stage); x_in/x_out/d_out/d_in as in stage_forward/backward.
  float span_forward(TrainState& s, const Tensor& tokens, const Tensor* x_in, const Tensor& targets, Tensor* x_out,
                     bool with_grad, const char* where);
  void span_backward(TrainState& s, const Tensor* d_out, float loss_scale, Tensor* d_in);
  // The MoE auxiliary loss (coefficient included) of a forward whose MoE layers routed `count`
  // slots to each expert with `prob` summed probabilities over N tokens each; sets s.aux_dprob.
  float moe_aux_loss(TrainState& s, const std::vector<double>& count, const std::vector<double>& prob, int64_t N,
                     const char* where);

  ModelConfig config_;
  Communicator& tp_;
  LayerSpan span_;
  ExpertParallel ep_;
  ExpertSplit expert_split_;
  std::vector<std::vector<double>> expert_load_;
  std::unique_ptr<Communicator> kv_group_;  // ranks sharing a replicated kv head (tp > NKV)
  std::unique_ptr<CommThread> tp_async_;    // training with overlap_tp_backward, tp > 1
  MatmulEngine eng_;
  DType kv_dtype_ = DType::kF32;  // of the pools make_kv_pool makes
  std::unique_ptr<RopeTable> rope_;
  std::unique_ptr<RopeTable> rope_local_;  // Gemma 3's local (sliding-window) layers
  Range vocab_range_;
  std::unique_ptr<VocabParallelEmbedding> embed_;  // (V_local, C): the tied LM head too
  Param pos_embed_;                                // (max_position, C) f32 Replicated, GPT-2 only
  std::unique_ptr<ColumnParallelLinear> lm_head_;  // (V_local, C), untied only
  std::unique_ptr<Norm> final_norm_;
  std::vector<TransformerLayer> layers_;
  std::unique_ptr<Workspace> ws_;
  std::unique_ptr<TrainState> train_;
  std::unique_ptr<TrainScratch> scratch_;
  std::map<int64_t, std::unique_ptr<TrainState>> stage_micro_;  // pipeline: activations per micro-batch
  // Released ones, reused; one pool may serve a stage's chunks (share_stage_states).
  std::shared_ptr<std::vector<std::unique_ptr<TrainState>>> stage_spare_;
  bool owns_stage_spare_ = true;  // counted by this model's activation_bytes
  TrainCompute compute_;
  std::function<void(int64_t part)> backward_hook_;
};

}  // namespace tensorpar

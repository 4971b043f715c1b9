// StagedModel: one pipeline stage of a model at inference, seen as the whole model (CausalLM).
// Each rank holds its stage's layers (and their KV cache: weights and cache per rank about
// 1/(tp x pp)); a forward passes the rows' hidden states from stage to stage (the stages' TP
// rank r to rank r), the last stage computes the logits and broadcasts them over the pipeline
// group, so every rank samples the same tokens as one whole model would and generation, chat
// and perplexity run unchanged. The stages run one after another (no micro-batch overlap: a
// stage waits while the others compute). Training pipelines run through train/pipeline.h.
#pragma once

#include <memory>

#include "model/causal_lm.h"
#include "model/transformer.h"

namespace tensorpar {

class StagedModel final : public CausalLM {
 public:
  // stage: this rank's span (LayerSpan); pp: its pipeline group (stage i = rank i); control:
  // every rank of the model (tp x pp), whose rank 0 leads.
  StagedModel(std::unique_ptr<Transformer> stage, Communicator& pp, Communicator& control);

  const ModelConfig& config() const override { return stage_->config(); }
  Communicator& tp() override { return stage_->tp(); }
  Communicator& control() override { return control_; }
  Range vocab_range() const override { return stage_->vocab_range(); }
  std::unique_ptr<KvPool> make_kv_pool(int64_t n_blocks, int64_t block_size) const override;
  int64_t kv_bytes_per_token() const override { return stage_->kv_bytes_per_token(); }
  // Collective over tp() and the pipeline: every rank passes the same chunks.
  void forward_batch(Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool) override;

  // Inference only: `train --pp` trains pipelines.
  float forward_backward(const Tensor& tokens, const Tensor& targets, float loss_scale) override;
  float forward_loss(const Tensor& tokens, const Tensor& targets) override;
  void set_train_compute(const TrainCompute& compute) override;
  int64_t activation_bytes() const override { return 0; }

  void set_int8_activations(bool on) override { stage_->set_int8_activations(on); }
  void set_kv_dtype(DType dtype) override { stage_->set_kv_dtype(dtype); }
  std::vector<ParamShard> parameters() override { return stage_->parameters(); }
  void zero_grad() override { stage_->zero_grad(); }
  int64_t weight_bytes() const override { return stage_->weight_bytes(); }

 private:
  std::unique_ptr<Transformer> stage_;
  Communicator& pp_;
  Communicator& control_;
  Tensor hidden_;  // (rows, C): what this stage received and passes on
};

}  // namespace tensorpar

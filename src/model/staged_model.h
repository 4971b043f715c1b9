// StagedModel: one pipeline stage of a model at inference, seen as the whole model (CausalLM).
// Each rank holds its stage's layers (and their KV cache: weights and cache per rank about
// 1/(tp x pp)); a forward passes the rows' hidden states from stage to stage (the stages' TP
// rank r to rank r), the last stage computes the logits and broadcasts them over the pipeline
// group, so every rank samples the same tokens as one whole model would and generation, chat,
// perplexity and the server run unchanged. A forward of many rows (a prompt, a server step with
// several prefills) is cut into micro-batches that follow each other through the stages, so the
// stages overlap: stage 1 runs the first micro-batch while stage 0 runs the second. The kernels
// are row-invariant, so the logits are the same floats however the rows are cut. Decode steps
// of few rows stay whole (a micro-batch rereads every weight of its stage). Training pipelines
// run through train/pipeline.h.
#pragma once

#include <memory>
#include <vector>

#include "model/causal_lm.h"
#include "model/transformer.h"

namespace tensorpar {

// The chunks cut into n_micro micro-batches of about equal rows, in order; a chunk that crosses
// a cut is split at a token (its first part asks for no logits, its last part for what the
// chunk asked), so the logits rows come out in the chunks' order.
std::vector<std::vector<SeqChunk>> split_micro_batches(std::span<const SeqChunk> seqs, int64_t n_micro);

class StagedModel final : public CausalLM {
 public:
  // stage: this rank's span (LayerSpan); pp: its pipeline group (stage i = rank i); control:
  // every rank of the model (tp x pp), whose rank 0 leads. A forward of N rows runs as
  // min(4 pp, N / micro_batch_rows) micro-batches (at least 1; micro_batch_rows 0: never cut):
  // m micro-batches leave the stages idle (pp - 1) / (m + pp - 1) of the time.
  StagedModel(std::unique_ptr<Transformer> stage, Communicator& pp, Communicator& control,
              int64_t micro_batch_rows = kDefaultMicroBatchRows);
  static constexpr int64_t kDefaultMicroBatchRows = 64;

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
  int64_t micro_batch_rows_;
  Tensor hidden_;  // (rows, C): what this stage received and passes on
};

}  // namespace tensorpar

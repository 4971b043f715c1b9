// StagedModel (see staged_model.h).
#include "model/staged_model.h"

#include "core/error.h"

namespace tensorpar {

StagedModel::StagedModel(std::unique_ptr<Transformer> stage, Communicator& pp, Communicator& control)
    : stage_(std::move(stage)), pp_(pp), control_(control) {
  TP_CHECK(stage_, "[StagedModel] no stage");
  const LayerSpan& s = stage_->span();
  const int last = pp_.size() - 1;
  TP_CHECK(s.embedding == (pp_.rank() == 0) && s.head == (pp_.rank() == last), "[StagedModel] pipeline rank ",
           pp_.rank(), " of ", pp_.size(), " holds layers [", s.first, ", ", s.last, ")",
           s.embedding ? " with the embedding" : "", s.head ? " with the head" : "",
           ": the first stage must hold the embedding and the last the head");
}

std::unique_ptr<KvPool> StagedModel::make_kv_pool(int64_t n_blocks, int64_t block_size) const {
  return stage_->make_kv_pool(n_blocks, block_size);
}

void StagedModel::forward_batch(Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool) {
  int64_t N = 0;
  for (const SeqChunk& c : seqs) N += int64_t(c.tokens.size());
  const int64_t C = config().hidden;
  const int stage = pp_.rank(), last = pp_.size() - 1;
  if (stage > 0) {
    ensure_f32(hidden_, {N, C});
    pp_.recv(hidden_.raw(), N * C, DType::kF32, stage - 1);
  }
  stage_->forward_stage(hidden_, logits_local, seqs, pool);
  if (stage < last) pp_.send(hidden_.raw(), N * C, DType::kF32, stage + 1);
  if (logits_local.numel() > 0) pp_.broadcast(logits_local.raw(), logits_local.numel(), DType::kF32, last);
}

float StagedModel::forward_backward(const Tensor&, const Tensor&, float) {
  TP_CHECK(false, "[StagedModel] a pipeline stage loaded for inference does not train: `tensorpar train --pp` "
           "runs training pipelines");
  return 0;
}

float StagedModel::forward_loss(const Tensor&, const Tensor&) {
  TP_CHECK(false, "[StagedModel] a pipeline stage loaded for inference does not train: `tensorpar train --pp` "
           "runs training pipelines");
  return 0;
}

void StagedModel::set_train_compute(const TrainCompute&) {
  TP_CHECK(false, "[StagedModel] a pipeline stage loaded for inference does not train: `tensorpar train --pp` "
           "runs training pipelines");
}

}  // namespace tensorpar

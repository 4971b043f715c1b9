// StagedModel (see staged_model.h).
#include "model/staged_model.h"

#include <algorithm>

#include "core/error.h"

namespace tensorpar {

std::vector<std::vector<SeqChunk>> split_micro_batches(std::span<const SeqChunk> seqs, int64_t n_micro) {
  int64_t N = 0;
  for (const SeqChunk& c : seqs) N += int64_t(c.tokens.size());
  n_micro = std::clamp<int64_t>(n_micro, 1, std::max<int64_t>(N, 1));
  std::vector<std::vector<SeqChunk>> out(static_cast<size_t>(n_micro));
  int64_t done = 0;  // rows placed so far
  size_t m = 0;
  for (const SeqChunk& c : seqs) {
    int64_t at = 0;
    const int64_t T = int64_t(c.tokens.size());
    while (at < T) {
      // Micro-batch m ends at row ceil((m + 1) N / n_micro); it is left as soon as it is full,
      // so it always has room here (n_micro <= N: every end is past the one before).
      const int64_t end = ((int64_t(m) + 1) * N + n_micro - 1) / n_micro;
      const int64_t take = std::min(T - at, end - done);
      SeqChunk part = c;
      part.tokens = c.tokens.subspan(size_t(at), size_t(take));
      part.pos0 = c.pos0 + at;
      const bool last_part = at + take == T;
      if (!last_part && c.logits == LogitRows::kLast) part.logits = LogitRows::kNone;
      out[m].push_back(part);
      at += take, done += take;
      if (done == end && m + 1 < out.size()) ++m;
    }
  }
  return out;
}

StagedModel::StagedModel(std::unique_ptr<Transformer> stage, Communicator& pp, Communicator& control,
                         int64_t micro_batch_rows)
    : stage_(std::move(stage)), pp_(pp), control_(control), micro_batch_rows_(micro_batch_rows) {
  TP_CHECK(micro_batch_rows >= 0, "[StagedModel] micro_batch_rows: got ", micro_batch_rows, ", expected >= 0");
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
  const int64_t n_micro =
      micro_batch_rows_ > 0 ? std::clamp<int64_t>(N / micro_batch_rows_, 1, 4 * int64_t(pp_.size())) : 1;
  const std::vector<std::vector<SeqChunk>> micro = split_micro_batches(seqs, n_micro);
  // The forward-only schedule: each stage receives, runs and passes on the micro-batches in
  // order (a send waits for the next stage's receive, which it posts as soon as it is free).
  int64_t r0 = 0;  // the micro-batch's first logits row
  for (const std::vector<SeqChunk>& mb : micro) {
    int64_t rows = 0, R = 0;
    for (const SeqChunk& c : mb) rows += int64_t(c.tokens.size()), R += logit_rows(c);
    if (stage > 0) {
      ensure_f32(hidden_, {rows, C});
      pp_.recv(hidden_.raw(), rows * C, DType::kF32, stage - 1);
    }
    Tensor logits_rows = logits_local.slice(0, r0, r0 + R);
    stage_->forward_stage(hidden_, logits_rows, mb, pool);
    if (stage < last) pp_.send(hidden_.raw(), rows * C, DType::kF32, stage + 1);
    r0 += R;
  }
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

// Pipeline parallelism for training: this rank is one stage (a Transformer holding a layer span)
// of the pipeline group `pp` (same tp and dp rank, one rank per stage). The executor walks the
// 1F1B order of pipeline_schedule.h, sending activations forward and their gradients back over
// pp with plain send/recv (the schedule's order cannot deadlock). With tied embeddings the last
// stage holds a copy of the embedding for its head; the two copies' gradients are summed over
// the group of the first and last stage (Megatron's embedding group) so they stay equal.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <vector>

#include "model/transformer.h"
#include "train/pipeline_schedule.h"

namespace tensorpar {

// Fills micro-batch m's tokens and targets (B, T) i64; every stage asks for every micro-batch.
using MicroBatchFn = std::function<void(int64_t m, Tensor& tokens, Tensor& targets)>;

class Pipeline {
 public:
  // Collective over pp (splits the embedding group). model and pp outlive the pipeline.
  Pipeline(Transformer& model, Communicator& pp);

  int stage() const { return pp_.rank(); }
  int n_stages() const { return pp_.size(); }
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == n_stages() - 1; }
  Communicator& pp() { return pp_; }
  Transformer& model() { return model_; }

  // Forward and backward of n_micro micro-batches in 1F1B order; gradients accumulate scaled by
  // loss_scale. Returns the sum of the micro-batches' mean losses, computed by the last stage
  // and the same on every stage. Collective over pp (and tp).
  double forward_backward(int64_t n_micro, const MicroBatchFn& batch, float loss_scale);
  // The same without gradients (evaluation).
  double forward_loss(int64_t n_micro, const MicroBatchFn& batch);

  // What the optimizer steps: the stage's parameters and, on a last stage with a tied head,
  // its embedding copy. Both copies of a tied embedding have copies = 2 so that a global norm
  // over tp x pp counts the tensor once.
  std::vector<ParamShard> parameters();
  // Sums the tied embedding's gradient over the first and last stage (after backward, before
  // the norm). No-op without a tied head or with one stage.
  void reduce_tied_grads();
  // Copies the first stage's embedding into the last stage's tied head (after initialisation,
  // loading or resuming), so that both start equal.
  void sync_tied_weights();
  // The first stage's copy of the tied embedding, or the last stage's (empty elsewhere).
  std::vector<ParamShard> tied_copy();

 private:
  double run(const std::vector<PipeStep>& steps, const MicroBatchFn& batch, float loss_scale, bool with_grad);

  Transformer& model_;
  Communicator& pp_;
  bool tied_ = false;                         // tied embeddings split over two stages
  std::unique_ptr<Communicator> embedding_;  // {first, last stage}, when tied_
  struct Micro {
    Tensor tokens, targets, x_in, x_out, d_out, d_in;
  };
  std::map<int64_t, Micro> micro_;  // micro-batches in flight on this stage
};

}  // namespace tensorpar

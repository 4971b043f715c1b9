// Pipeline parallelism for training: this rank is one stage of the pipeline group `pp` (same tp
// and dp rank, one rank per stage), holding one Transformer with a layer span, or several model
// chunks (virtual stages, train --pp-virtual) run in the interleaved order. The executor walks
// the order of pipeline_schedule.h, sending activations forward and their gradients back with
// plain send/recv (1F1B's order cannot deadlock even where a send waits for its receive; the
// interleaved one needs the buffered sends of threads and mpi, and sends the two kinds over two
// groups split from pp, since a link may carry both in one direction). With tied embeddings the
// last stage holds a copy of the embedding for its head; the two copies' gradients are summed
// over the group of the first and last stage (Megatron's embedding group) so they stay equal.
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
  // chunks: this stage's model chunks, in order: one for 1F1B, or V for the interleaved
  // schedule, chunk v holding virtual stage v * pp.size() + pp.rank() of
  // split_layers(n_layers, pp.size() * V) (interleaved_layer_spans). Collective over pp (splits
  // the embedding group, and the two transfer groups when interleaved). The chunks and pp
  // outlive the pipeline.
  Pipeline(std::vector<Transformer*> chunks, Communicator& pp);
  Pipeline(Transformer& model, Communicator& pp) : Pipeline(std::vector<Transformer*>{&model}, pp) {}

  int stage() const { return pp_.rank(); }
  int n_stages() const { return pp_.size(); }
  int n_chunks() const { return int(chunks_.size()); }
  bool is_first() const { return stage() == 0; }
  bool is_last() const { return stage() == n_stages() - 1; }
  Communicator& pp() { return pp_; }
  Transformer& chunk(int v) { return *chunks_[size_t(v)]; }

  // The stage's model as a trainer steps it, over every chunk (CausalLM's calls of the same names).
  void zero_grad();
  void set_train_compute(const TrainCompute& compute);
  // hook(part) as CausalLM::set_backward_hook, kEndGrads once per micro-batch: after the
  // micro-batch's last backward on this stage (its chunk 0's).
  void set_backward_hook(const std::function<void(int64_t part)>& hook);
  int64_t activation_bytes() const;
  // Every chunk's parameters (what a checkpoint holds: no tied head's copy).
  std::vector<ParamShard> model_parameters();

  // Forward and backward of n_micro micro-batches in 1F1B order (interleaved with chunks:
  // n_micro a multiple of the stages); gradients accumulate scaled by loss_scale. Returns the sum of the micro-batches' mean losses, computed by the last stage
  // and the same on every stage. Collective over pp (and tp).
  double forward_backward(int64_t n_micro, const MicroBatchFn& batch, float loss_scale);
  // The same without gradients (evaluation).
  double forward_loss(int64_t n_micro, const MicroBatchFn& batch);

  // What the optimizer steps: the stage's parameters (every chunk's) and, on a last stage with a tied head,
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

  std::vector<Transformer*> chunks_;
  Communicator& pp_;
  bool tied_ = false;                         // tied embeddings split over two stages
  std::unique_ptr<Communicator> embedding_;  // {first, last stage}, when tied_
  // Interleaved: activations and gradients each on a group of their own (null: both on pp_).
  std::unique_ptr<Communicator> activations_, gradients_;
};

// The layer spans of this stage's chunks: chunk v holds virtual stage v * n_stages + stage of
// split_layers(n_layers, n_stages * n_chunks, counts) (counts: one per virtual stage, in
// order). Throws naming the sizes when they do not fit.
std::vector<LayerSpan> interleaved_layer_spans(int64_t n_layers, int n_stages, int n_chunks, int stage,
                                               std::span<const int64_t> counts = {});

}  // namespace tensorpar

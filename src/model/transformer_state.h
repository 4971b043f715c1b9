// Transformer's private buffers: the inference workspace (grows, never shrinks, so decode
// allocates nothing per token) and what one training step keeps for its backward.
#pragma once

#include <vector>

#include "model/transformer.h"

namespace tensorpar {

struct Transformer::Workspace {
  Tensor x, hf;      // (rows, C): residual stream; the logits rows, final-normed
  Tensor mean, rstd; // (rows): the final norm's statistics
  LayerActs acts;    // every layer's scratch (layers run one after another)
  std::vector<int64_t> ids, positions;
  std::vector<PagedSeq> seqs;       // the batch's sequences (rows, positions, block tables)
  std::vector<int64_t> logit_rows;  // rows whose logits are wanted
};

struct Transformer::TrainState {
  std::vector<Tensor> inputs;     // inputs[l]: layer l's input (N, C); inputs[L]: the stack's output
  std::vector<LayerActs> layers;  // what each layer's forward wrote (empty for recomputed layers)
  LayerActs recomputed;           // the activations of the recomputed layer being run backward
  Tensor hf, meanf, rstdf, logits, lse;  // (N, C), (N), (N), (N, V_local), (N)
  Tensor d_logits, d_h, d_x;             // backward scratch: (N, V_local), (N, C), (N, C)
  // Sequence parallel (TrainCompute::sequence_parallel): inputs, hf, meanf, rstdf, d_h and d_x
  // hold this rank's rows only (the gathered buffers are TrainScratch's).
  std::vector<int64_t> positions;
  std::vector<int64_t> ids;  // the step's tokens (N), for the embedding's backward
  Tensor targets;            // (N) view of the caller's targets (the last stage's loss)
  int64_t B = 0, T = 0;
  bool with_grad = false;
  // MoE: the auxiliary loss's gradient on each expert's router probability (per unit of loss
  // scale; empty without the loss), and the loss-scaled copy backward hands to the layers.
  std::vector<float> aux_dprob, aux_dprob_scaled;
  float z_dlse = 0;  // the router z-loss's gradient per unit of lse and of loss scale
  void invalidate() { *this = TrainState{}; }
};

// What a training forward or backward needs only while it runs, shared by every micro-batch a
// pipeline stage holds (they run one at a time): under sequence parallelism the layers'
// gathered (N, C) buffers, which outside the layers also hold the LM head's gathered input
// (sp.full) and the embedding's output, its gradient and the head's input gradient
// (sp.full_grad).
struct Transformer::TrainScratch {
  SequenceParallelScratch sp;
};

}  // namespace tensorpar

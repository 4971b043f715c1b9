// The pipeline's plan, as pure functions: which layers each stage holds, and the order in which
// a stage runs its micro-batches' forwards, backwards and the sends/receives between adjacent
// stages (1F1B, PipeDream-Flush as in Megatron-LM). The executor (pipeline.h) only walks it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace tensorpar {

enum class PipeOp : uint8_t {
  kRecvForward,   // receive micro-batch's input activations (N, C) from the previous stage
  kForward,       // run the micro-batch's forward through this stage's layers
  kSendForward,   // send its output activations to the next stage
  kRecvBackward,  // receive the gradient of its output from the next stage
  kBackward,      // run its backward
  kSendBackward,  // send the gradient of its input to the previous stage
};

struct PipeStep {
  PipeOp op;
  int64_t micro;
  bool operator==(const PipeStep&) const = default;
};

std::string pipe_step_name(const PipeStep& s);  // e.g. "F3", "sendB1"

// The 1F1B order of `stage` (0-based) of n_stages over n_micro micro-batches: min(n_stages -
// stage - 1, n_micro) warm-up forwards, then one forward and one backward in turn, then the
// remaining backwards; at most n_stages - stage micro-batches keep activations at once.
// Sends and receives are placed so that every link between stages s and s + 1 sees the same
// sequence from both ends (a send facing a receive of the same micro-batch): where the two ends
// both send and receive at once (Megatron's send_forward_recv_backward facing
// send_backward_recv_forward) the even stage sends first and the odd stage receives first. So
// the order cannot deadlock even where a send blocks until its receive (MPI rendezvous).
std::vector<PipeStep> one_f_one_b_schedule(int stage, int n_stages, int64_t n_micro);

// Forward only (evaluation): receive, forward, send, one micro-batch after another.
std::vector<PipeStep> forward_only_schedule(int stage, int n_stages, int64_t n_micro);


}  // namespace tensorpar

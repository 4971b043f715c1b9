// The pipeline's plan, as pure functions: the order in which a stage runs its micro-batches'
// forwards, backwards and the sends/receives between stages — 1F1B (PipeDream-Flush as in
// Megatron-LM) and its interleaved form, in which each stage holds several model chunks
// (virtual stages). The executor (pipeline.h) only walks it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "model/transformer.h"

namespace tensorpar {

enum class PipeOp : uint8_t {
  kRecvForward,   // receive micro-batch's input activations (N, C) from the previous stage
  kForward,       // run the micro-batch's forward through this stage's layers (of the chunk)
  kSendForward,   // send its output activations to the next stage
  kRecvBackward,  // receive the gradient of its output from the next stage
  kBackward,      // run its backward
  kSendBackward,  // send the gradient of its input to the previous stage
};

struct PipeStep {
  PipeOp op;
  int64_t micro;
  int chunk = 0;  // interleaved: which of the stage's model chunks (0 otherwise)
  bool operator==(const PipeStep&) const = default;
};

std::string pipe_step_name(const PipeStep& s);  // e.g. "F3", "sendB1", "F3c1" (chunk 1)

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

// Interleaved 1F1B (Narayanan et al. 2021, section 2.2; Megatron-LM's interleaved schedule) for
// a stage holding n_chunks model chunks: with P = n_stages, chunk v of stage s is virtual stage
// v * P + s of the P * n_chunks, so a micro-batch goes through every stage n_chunks times, the
// last stage handing it to the first stage's next chunk. Micro-batches run in groups of P (n_micro
// must be a multiple of P, as in Megatron-LM: a smaller last group leaves a larger bubble than
// 1F1B and can deadlock): each group through chunk 0, then chunk 1, ... (backward: the last chunk
// first). Warm-up runs min(total, 2 (P - s - 1) + (n_chunks - 1) P) forwards, then one
// forward and one backward in turn, then the remaining backwards; the pipeline bubble shrinks
// to (P - 1) / (m n_chunks) of the ideal time. Each receive comes right before the step that
// needs it and each send right after the step that made it: the order cannot deadlock when
// sends do not wait for their receives (Communicator::send on threads and mpi), and each link
// sees the activations in one order from both ends and the gradients in another, so the two
// kinds travel on two groups (Pipeline). n_chunks = 1 is one_f_one_b_schedule.
std::vector<PipeStep> interleaved_schedule(int stage, int n_stages, int n_chunks, int64_t n_micro);
// Its forward-only order (evaluation): every forward in the order above.
std::vector<PipeStep> interleaved_forward_only_schedule(int stage, int n_stages, int n_chunks, int64_t n_micro);
// The peers of chunk `chunk` of `stage` in the interleaved ring: the stage its input comes from
// and the stage its output goes to, or -1 where there is none (the model's first chunk has no
// input, its last no output).
int interleaved_prev_stage(int stage, int n_stages, int chunk, int n_chunks);
int interleaved_next_stage(int stage, int n_stages, int chunk, int n_chunks);


}  // namespace tensorpar

// Cross-entropy over logits Sharded(vocab), never gathered (Megatron-Core's
// vocab_parallel_cross_entropy). Forward: local max -> all-reduce MAX; then this rank's sum of
// exp, target logit (owned by one rank, zero elsewhere) and, with label smoothing, sum of logits
// travel in ONE all-reduce SUM (3 x N floats). Backward is local. Label smoothing uses the
// GLOBAL vocab size, not the shard's.
#pragma once

#include <cstdint>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/cross_entropy.h"
#include "parallel/partition.h"

namespace tensorpar {

// logits_local (N, V_local) f32 holds global vocab columns `vocab_range` of `vocab`; targets (N)
// i64 in [0, vocab) or opt.ignore_index (the same on every rank of tp). Writes losses (N) f32
// per row (0 for ignored rows; may be null) and lse (N) f32, the global log-sum-exp kept for
// backward. Returns the mean loss over non-ignored rows (0 if none), identical on every rank.
float vocab_parallel_cross_entropy_forward(Tensor* losses, Tensor& lse, const Tensor& logits_local,
                                           const Tensor& targets, Range vocab_range, int64_t vocab,
                                           Communicator& tp, const CrossEntropyOptions& opt = {});

// d_logits_local (N, V_local) += (softmax - smoothed onehot) * d_loss / count, count the
// non-ignored rows: the gradient of the mean loss times d_loss. No communication.
void vocab_parallel_cross_entropy_backward(Tensor& d_logits_local, float d_loss,
                                           const Tensor& logits_local, const Tensor& lse,
                                           const Tensor& targets, Range vocab_range, int64_t vocab,
                                           const CrossEntropyOptions& opt = {});

}  // namespace tensorpar

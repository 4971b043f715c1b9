// Dropout whose mask is a pure function of (stream, index): backward recomputes it instead of
// storing it, and the caller chooses whose mask a shard gets. Megatron's rule: replicated
// regions draw from replicated_stream (every rank the same mask); head-sharded regions from
// tp_local_stream. A shard that should match the unsharded run (e.g. sequence-parallel rows)
// passes first_index = base + (its first global element), with replicated_stream.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "parallel/rng.h"

namespace tensorpar {

// out = in * keep / (1 - p), keep_i = stream.uniform(first_index + i) >= p. p in [0, 1); p == 0
// copies. in and out f32 contiguous, same shape (may be the same tensor).
void dropout_forward(Tensor& out, const Tensor& in, float p, const RngStream& stream,
                     uint64_t first_index);
// d_in += d_out * keep / (1 - p), the same mask as the forward with the same arguments.
void dropout_backward(Tensor& d_in, const Tensor& d_out, float p, const RngStream& stream,
                      uint64_t first_index);

}  // namespace tensorpar

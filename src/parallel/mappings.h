// The communication mappings of tensor parallelism, in Megatron-Core's vocabulary, each as a
// forward/backward pair called directly by the layers: f (copy_to_tp_region), g
// (reduce_from_tp_region), and the sequence-parallel pairs along the first dim (tokens), which
// no model path uses yet (sequence parallelism comes with the pipeline work). Tensors are f32 and contiguous; every function returns
// at once (or just copies) when the group has one rank. Uneven shards follow partition_even.
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"
#include "parallel/partition.h"

namespace tensorpar {

// f: identity forward (nothing to do) / all-reduce (sum) backward, in place. Placed before a
// column-parallel layer: its input is Replicated, its input gradient Partial.
inline void copy_to_tp_region_forward(Tensor& /*x*/, Communicator& /*tp*/) {}
void copy_to_tp_region_backward(Tensor& d_x, Communicator& tp);

// g: all-reduce (sum) forward, in place / identity backward. Placed after a row-parallel layer.
void reduce_from_tp_region_forward(Tensor& x, Communicator& tp);
inline void reduce_from_tp_region_backward(Tensor& /*d_x*/, Communicator& /*tp*/) {}

// Sequence parallel: tensors are (N, ...) with N tokens (rows) first; rank r holds the rows
// partition_even(N, size, r). Norms and dropout run on the local rows.
// Split rows forward / all-gather backward.
void scatter_to_sequence_parallel_region_forward(Tensor& out, const Tensor& in, Communicator& tp);
void scatter_to_sequence_parallel_region_backward(Tensor& d_in, const Tensor& d_out,
                                                  Communicator& tp);
// All-gather rows forward (before a column-parallel layer) / reduce-scatter backward.
void gather_from_sequence_parallel_region_forward(Tensor& out, const Tensor& in, Communicator& tp);
void gather_from_sequence_parallel_region_backward(Tensor& d_in, const Tensor& d_out,
                                                   Communicator& tp);
// Reduce-scatter rows forward (after a row-parallel layer, instead of g) / all-gather backward.
void reduce_scatter_to_sequence_parallel_region_forward(Tensor& out, const Tensor& in,
                                                        Communicator& tp);
void reduce_scatter_to_sequence_parallel_region_backward(Tensor& d_in, const Tensor& d_out,
                                                         Communicator& tp);

// The collectives under the sequence-parallel pairs, usable alone: all-gather / reduce-scatter
// (sum) of rows with uneven counts (partition_even of full's dim 0).
void all_gather_rows(Tensor& full, const Tensor& local, Communicator& tp);
void reduce_scatter_rows(Tensor& local, const Tensor& full, Communicator& tp);

}  // namespace tensorpar

// The communication mappings of tensor parallelism, in Megatron-Core's vocabulary, each as a
// forward/backward pair called directly by the layers: f (copy_to_tp_region), g
// (reduce_from_tp_region), scatter/gather along the last dim, and the sequence-parallel
// variants along the first dim (tokens). Tensors are f32 and contiguous; every function returns
// at once (or just copies) when the group has one rank. Uneven shards follow partition_even.
#pragma once

#include <span>

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

// Split along the last dim: out (..., n_local) = this rank's columns of in (..., n), columns
// partition_even(n, tp.size(), tp.rank()). Backward gathers them back (d_in is written).
void scatter_to_tp_region_forward(Tensor& out, const Tensor& in, Communicator& tp);
void scatter_to_tp_region_backward(Tensor& d_in, const Tensor& d_out, Communicator& tp);

// Gather along the last dim: out (..., n) from every rank's in (..., n_local), rank r's columns
// at ranges[r] (default: partition_even(n, size, r)); ranges must tile [0, n) in rank order.
// Backward keeps this rank's columns of d_out (d_in is written).
void gather_from_tp_region_forward(Tensor& out, const Tensor& in, Communicator& tp);
void gather_from_tp_region_forward(Tensor& out, const Tensor& in, Communicator& tp,
                                   std::span<const Range> ranges);
void gather_from_tp_region_backward(Tensor& d_in, const Tensor& d_out, Communicator& tp);
void gather_from_tp_region_backward(Tensor& d_in, const Tensor& d_out, Communicator& tp,
                                    std::span<const Range> ranges);

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

// The communication mappings of tensor parallelism, in Megatron-Core's vocabulary, each as a
// forward/backward pair called directly by the layers: f (copy_to_tp_region), g
// (reduce_from_tp_region), and the sequence-parallel pairs along the first dim (tokens), which
// no model path uses yet (sequence parallelism comes with the pipeline work). Tensors are f32 and contiguous; every function returns
// at once (or just copies) when the group has one rank. Uneven shards follow partition_even.
#pragma once

#include <cstdint>

#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "parallel/partition.h"

namespace tensorpar {

// f: identity forward (nothing to do) / all-reduce (sum) backward, in place. Placed before a
// column-parallel layer: its input is Replicated, its input gradient Partial.
inline void copy_to_tp_region_forward(Tensor& /*x*/, Communicator& /*tp*/) {}
void copy_to_tp_region_backward(Tensor& d_x, Communicator& tp);

// f's backward in the background, so that the all-reduce of a column-parallel layer's input
// gradient overlaps the GEMMs of its weight gradient (Megatron's overlap of the input-gradient
// all-reduce with the weight-gradient computation): start() queues it on `async` (a CommThread
// over the TP group) once d_x is complete, finish() waits and rethrows its failure. The caller
// must leave d_x alone in between; a caller unwinding before finish() still waits (the
// destructor), so d_x outlives the operation. Same sum, same bits as copy_to_tp_region_backward.
class CopyToTpRegionBackwardAsync {
 public:
  CopyToTpRegionBackwardAsync(Tensor& d_x, CommThread& async) : d_x_(d_x), async_(async) {}
  ~CopyToTpRegionBackwardAsync();
  CopyToTpRegionBackwardAsync(const CopyToTpRegionBackwardAsync&) = delete;
  CopyToTpRegionBackwardAsync& operator=(const CopyToTpRegionBackwardAsync&) = delete;
  void start();
  void finish();

 private:
  Tensor& d_x_;
  CommThread& async_;
  int64_t ticket_ = 0;  // 0: not started or finished
};

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

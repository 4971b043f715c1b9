// RowParallelLinear: y = x W^T + b with W (out, in) split by columns (input features) over the
// TP group. Input Sharded(last) -> Partial -> g (all-reduce) -> Replicated; the bias is added
// once, after the reduce, so the result does not depend on the TP size beyond summation order.
//
// hold_whole_rows() (inference, LoadOptions::tp_invariant) removes that order too: each rank
// holds whole rows of W (output features), gathers the full input and computes its outputs over
// all of K, exactly as one rank would; its "partial" result is those columns with zeros elsewhere,
// so the same all-reduce (or reduce-scatter) adds only zeros to each value: the output is bitwise
// the TP = 1 output at any TP size (given kernels whose result for an output does not depend on
// which other outputs share the call, which the CPU kernels guarantee). It costs an all-gather
// of the input per call.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weights.h"
#include "parallel/partition.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

class RowParallelLinear {
 public:
  // Columns partition_even(in_features, tp_size, tp_rank).
  RowParallelLinear(int64_t in_features, int64_t out_features, bool has_bias, int tp_size,
                    int tp_rank);
  // Explicit columns per rank (tiling [0, in_features) in rank order), e.g. whole heads.
  RowParallelLinear(int64_t in_features, int64_t out_features, bool has_bias,
                    std::vector<Range> in_ranges, int tp_rank);

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int64_t in_local() const { return in_range().size(); }
  Range in_range() const { return ranges_[size_t(rank_)]; }
  const std::vector<Range>& in_ranges() const { return ranges_; }
  bool has_bias() const { return has_bias_; }

  Tensor& weight() { return weight_; }  // (out, in_local) or (out_local, in): f32, bf16 or block-quantized
  Tensor& bias() { return bias_; }      // (out) f32, Replicated; undefined without bias
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  // Gradients (f32, same shapes), allocated and zeroed by the first backward; they accumulate.
  // d_bias is Replicated: identical on every rank, not to be summed over TP.
  Tensor& d_weight() { return d_weight_; }
  Tensor& d_bias() { return d_bias_; }
  void zero_grad();
  // As ColumnParallelLinear::set_row_packed.
  void set_row_packed(bool on) { weight_ = row_packed_as(weight_, on); }

  // Before load: this rank holds rows out_range() of W (out, in) instead of columns, and
  // forward_partial gathers its input over `tp` (kept by reference; the layer's own group).
  // Inference only: backward throws.
  void hold_whole_rows(Communicator& tp);
  bool holds_whole_rows() const { return whole_rows_ != nullptr; }
  Range out_range() const;  // with hold_whole_rows: this rank's rows; else all of them
  // The dim of the full weight (out, in) this rank holds a slice of, and the slice: 1 and
  // in_range(), or 0 and out_range() with hold_whole_rows.
  int shard_dim() const { return whole_rows_ ? 0 : 1; }
  Range shard_range() const { return whole_rows_ ? out_range() : in_range(); }

  // Takes columns in_range() of the full weight (out, in) (rows out_range() with
  // hold_whole_rows) and the whole bias (out).
  void load(const SliceLoader& weight, const SliceLoader& bias = nullptr);
  // Weight: this rank's columns of a full N(0, stddev^2) matrix (init_normal_sliced); bias zeros.
  void init_normal(float stddev, uint64_t seed, uint64_t tensor_id);

  // out (N, out) = all-reduce over tp of in (N, in_local) x W_local^T, then + b.
  void forward(MatmulEngine& eng, Tensor& out, const Tensor& in, Communicator& tp) const;
  // out (N, out) = this rank's Partial sum, no bias, no communication: for sequence parallel
  // (reduce_scatter_to_sequence_parallel_region next) or to fuse several reductions; add the
  // bias after the reduction with add_bias.
  void forward_partial(MatmulEngine& eng, Tensor& out, const Tensor& in) const;
  // out (..., out) += b (no-op without bias).
  void add_bias(Tensor& out) const;

  // g backward is the identity, so no communication: d_in (N, in_local) (may be null) +=
  // d_out (N, out) x W_local; d_weight += d_out^T x in; d_bias += sums of d_out.
  void backward(MatmulEngine& eng, Tensor* d_in, const Tensor& d_out, const Tensor& in);

 private:
  void forward_whole_rows(MatmulEngine& eng, Tensor& out, const Tensor& in) const;

  int64_t in_ = 0, out_ = 0;
  bool has_bias_ = false;
  std::vector<Range> ranges_;
  int rank_ = 0;
  Tensor weight_, bias_, d_weight_, d_bias_;
  Communicator* whole_rows_ = nullptr;  // hold_whole_rows' group
};

}  // namespace tensorpar

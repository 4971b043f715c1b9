// ColumnParallelLinear: y = x W^T + b with W (out, in) split by rows (output features) over the
// TP group. Input Replicated -> output Sharded(last). The f mapping sits before it: identity
// forward, all-reduce of the input gradient backward (Megatron-Core's layers.py, minus the flags).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "parallel/partition.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

class ColumnParallelLinear {
 public:
  // Rows partition_even(out_features, tp_size, tp_rank).
  ColumnParallelLinear(int64_t in_features, int64_t out_features, bool has_bias, int tp_size,
                       int tp_rank);
  // Explicit rows per rank (they tile [0, out_features) in rank order), e.g. whole heads.
  ColumnParallelLinear(int64_t in_features, int64_t out_features, bool has_bias,
                       std::vector<Range> out_ranges, int tp_rank);

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }
  int64_t out_local() const { return out_range().size(); }
  Range out_range() const { return ranges_[size_t(rank_)]; }
  const std::vector<Range>& out_ranges() const { return ranges_; }
  bool has_bias() const { return has_bias_; }

  Tensor& weight() { return weight_; }  // (out_local, in): f32, bf16 or block-quantized
  Tensor& bias() { return bias_; }      // (out_local) f32, undefined without bias
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }
  // Gradients (f32, same shapes), allocated and zeroed by the first backward; they accumulate.
  Tensor& d_weight() { return d_weight_; }
  Tensor& d_bias() { return d_bias_; }
  void zero_grad();

  // Takes rows out_range() of the full weight (out, in) and bias (out); `bias` may be empty
  // when the layer has none.
  void load(const SliceLoader& weight, const SliceLoader& bias = nullptr);
  // Weight: this rank's rows of a full N(0, stddev^2) matrix drawn by init_normal_sliced (the
  // same model at every TP size); bias: zeros.
  void init_normal(float stddev, uint64_t seed, uint64_t tensor_id);

  // out (N, out_local) = in (N, in) x W_local^T + b_local.
  void forward(MatmulEngine& eng, Tensor& out, const Tensor& in) const;
  // out (N, out) gathered over the group (Replicated output).
  void forward_gathered(MatmulEngine& eng, Tensor& out, const Tensor& in, Communicator& tp) const;

  // d_in (N, in) = all-reduce over tp of d_out (N, out_local) x W_local (written, not
  // accumulated: it is the f backward); d_weight += d_out^T x in; d_bias += sums of d_out.
  void backward(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out, const Tensor& in,
                Communicator& tp);
  // The same without the all-reduce: d_in (may be null) += this rank's Partial d_out x W_local.
  // For several column layers on one input (q, k, v): accumulate, then one
  // copy_to_tp_region_backward(d_in, tp).
  void backward_partial(MatmulEngine& eng, Tensor* d_in, const Tensor& d_out, const Tensor& in);
  // Backward of forward_gathered: d_out (N, out) full; keeps this rank's columns.
  void backward_gathered(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out, const Tensor& in,
                         Communicator& tp);

 private:
  void check_group(const Communicator& tp, const char* where) const;

  int64_t in_ = 0, out_ = 0;
  bool has_bias_ = false;
  std::vector<Range> ranges_;
  int rank_ = 0;
  Tensor weight_, bias_, d_weight_, d_bias_;
};

}  // namespace tensorpar

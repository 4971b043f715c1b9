// ColumnParallelLinear: y = x W^T + b with W (out, in) split by rows (output features) over the
// TP group. Input Replicated -> output Sharded(last). The f mapping sits before it: identity
// forward, all-reduce of the input gradient backward (docs/ARCHITECTURE.md, "f and g").
//
// A layer may fuse several weights that read the same input into one GEMM (q/k/v of attention,
// gate/up of a gated MLP): each is a `ColumnPart` with its own global rows and per-rank ranges,
// and this rank's output columns are the parts' local rows in part order. Parts of one dtype are
// stored as one weight; parts of different dtypes (a GGUF file may mix quant types) stay separate
// segments, each multiplied into its own output columns (inference only).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "comm/comm_thread.h"
#include "comm/communicator.h"
#include "core/tensor.h"
#include "kernels/cpu/matmul.h"
#include "parallel/partition.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

// One fused weight: `out` rows of the full (out, in) tensor, rank r holding rows ranges[r]. The
// ranges go in rank order, cover [0, out) without gaps, and may repeat a range on consecutive
// ranks (kv heads replicated when tp > n_kv_heads) or be empty (a rank without heads).
struct ColumnPart {
  int64_t out = 0;
  std::vector<Range> ranges;
};

class ColumnParallelLinear {
 public:
  // One part, rows partition_even(out_features, tp_size, tp_rank).
  ColumnParallelLinear(int64_t in_features, int64_t out_features, bool has_bias, int tp_size,
                       int tp_rank);
  // One part with explicit rows per rank (they tile [0, out_features) in rank order).
  ColumnParallelLinear(int64_t in_features, int64_t out_features, bool has_bias,
                       std::vector<Range> out_ranges, int tp_rank);
  // Fused parts (see ColumnPart); every part has a bias or none does.
  ColumnParallelLinear(int64_t in_features, std::vector<ColumnPart> parts, bool has_bias,
                       int tp_rank);

  int64_t in_features() const { return in_; }
  int64_t out_local() const { return out_local_; }
  bool has_bias() const { return has_bias_; }
  int64_t n_parts() const { return int64_t(parts_.size()); }
  const ColumnPart& part(int64_t i) const { return parts_[size_t(i)]; }
  // Rows of part i's full weight held here, and where they start in this rank's output columns.
  Range part_range(int64_t i) const { return parts_[size_t(i)].ranges[size_t(rank_)]; }
  int64_t part_offset(int64_t i) const { return offsets_[size_t(i)]; }
  // Ranks holding the same rows of part i as this rank (1 unless replicated).
  int part_copies(int64_t i) const;

  // The local weight (out_local, in) when it is one segment (f32, bf16 or block-quantized; the
  // training case); throws when parts of different dtypes were loaded.
  Tensor& weight();
  const Tensor& weight() const;
  Tensor& bias() { return bias_; }  // (out_local) f32, undefined without bias
  const Tensor& bias() const { return bias_; }
  // Gradients (f32, same shapes), allocated and zeroed by the first backward; they accumulate.
  Tensor& d_weight() { return d_weight_; }
  Tensor& d_bias() { return d_bias_; }
  void zero_grad();
  int64_t weight_bytes() const;
  // Inference: each segment in the layout this CPU's inference kernel reads (packed_weights.h):
  // a packable GGUF type row-packed for the int8 kernel while on, back in its GGUF layout when
  // off (f32-activation inference reads that one); bf16/f16 in panels where this CPU prefers
  // them. Other types are left as they are. Training must not call it.
  void set_row_packed(bool on);

  // Part i's rows of the weight / bias and of their gradients, as views that share storage
  // (persistent objects: a ParamShard may point at them until the next call); grads allocated.
  Tensor& part_weight(int64_t i);
  Tensor& part_bias(int64_t i);
  Tensor& part_d_weight(int64_t i);
  Tensor& part_d_bias(int64_t i);

  // Takes rows part_range(i) of each part's full weight (out, in) and bias (out); `biases` is
  // empty when the layer has none. One loader per part.
  void load(std::span<const SliceLoader> weights, std::span<const SliceLoader> biases = {});
  void load(const SliceLoader& weight, const SliceLoader& bias = nullptr);
  // Each part's rows of a full N(0, stddev^2) matrix drawn by init_normal_sliced (the same model
  // at every TP size), tensor_ids[i] for part i; bias zeros.
  void init_normal(float stddev, uint64_t seed, std::span<const uint64_t> tensor_ids);
  void init_normal(float stddev, uint64_t seed, uint64_t tensor_id);

  // out (N, out_local) = in (N, in) x W_local^T + b_local.
  void forward(MatmulEngine& eng, Tensor& out, const Tensor& in) const;

  // d_in (N, in) = all-reduce over tp of d_out (N, out_local) x W_local (written, not
  // accumulated: it is the f backward); d_weight += d_out^T x in; d_bias += sums of d_out.
  // With `async` (a CommThread over tp) the all-reduce runs while d_weight is computed.
  void backward(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out, const Tensor& in,
                Communicator& tp, CommThread* async = nullptr);
  // The same without the all-reduce: d_in (may be null) += this rank's Partial d_out x W_local.
  // For several column layers on one input: accumulate, then one copy_to_tp_region_backward.
  void backward_partial(MatmulEngine& eng, Tensor* d_in, const Tensor& d_out, const Tensor& in);
  // The two halves of backward_partial, for a caller that must change d_out in between (the
  // sum over the copies of a replicated kv head's gradient).
  void backward_input(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out, const Tensor& in) const;
  void backward_weight(MatmulEngine& eng, const Tensor& d_out, const Tensor& in);

 private:
  struct Segment {
    int64_t row0 = 0, rows = 0;  // this rank's output columns [row0, row0 + rows)
    Tensor w;                    // (rows, in)
  };
  void init_parts(std::vector<ColumnPart> parts);
  void check_group(const Communicator& tp, const char* where) const;
  void check_backward(const Tensor& d_out, const Tensor& in, const char* where) const;
  const Segment& segment_of(int64_t part) const;

  int64_t in_ = 0, out_local_ = 0;
  bool has_bias_ = false;
  int rank_ = 0;
  std::vector<ColumnPart> parts_;
  std::vector<int64_t> offsets_;
  std::vector<Segment> segments_;
  Tensor bias_, d_weight_, d_bias_;
  std::vector<Tensor> views_w_, views_b_, views_dw_, views_db_;
};

}  // namespace tensorpar

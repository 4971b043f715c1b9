// ColumnParallelLinear (see column_parallel_linear.h).
#include "parallel/column_parallel_linear.h"

#include <utility>

#include "core/error.h"
#include "parallel/mappings.h"
#include "parallel/rng.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           bool has_bias, int tp_size, int tp_rank)
    : ColumnParallelLinear(in_features, out_features, has_bias,
                           partition_even_all(out_features, tp_size), tp_rank) {}

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           bool has_bias, std::vector<Range> out_ranges,
                                           int tp_rank)
    : in_(in_features), out_(out_features), has_bias_(has_bias), ranges_(std::move(out_ranges)),
      rank_(tp_rank) {
  TP_CHECK(in_ >= 1 && out_ >= 1, "[ColumnParallelLinear] features: got in ", in_, " out ", out_,
           ", expected >= 1");
  TP_CHECK(ranges_tile(ranges_, out_), "[ColumnParallelLinear] out_ranges must tile [0, ", out_,
           ") in rank order (", ranges_.size(), " ranges)");
  TP_CHECK(rank_ >= 0 && rank_ < int(ranges_.size()), "[ColumnParallelLinear] tp_rank: got ",
           rank_, ", expected in [0, ", ranges_.size(), ")");
  weight_ = Tensor::zeros({out_local(), in_}, DType::kF32);
  if (has_bias_) bias_ = Tensor::zeros({out_local()}, DType::kF32);
}

void ColumnParallelLinear::zero_grad() {
  if (d_weight_.numel() > 0) d_weight_.fill_zero();
  if (d_bias_.numel() > 0) d_bias_.fill_zero();
}

void ColumnParallelLinear::load(const SliceLoader& weight, const SliceLoader& bias) {
  Tensor w = weight(0, out_range());
  TP_CHECK(w.shape() == (Shape{out_local(), in_}), "[ColumnParallelLinear::load] weight rows ",
           range_str(out_range()), ": got ", w.describe(), ", expected ",
           shape_str({out_local(), in_}), " (rank ", rank_, ")");
  weight_ = std::move(w);
  d_weight_ = Tensor();
  if (has_bias_) {
    TP_CHECK(bool(bias), "[ColumnParallelLinear::load] the layer has a bias but no bias loader");
    Tensor b = as_f32(bias(0, out_range()));
    TP_CHECK(b.shape() == (Shape{out_local()}), "[ColumnParallelLinear::load] bias rows ",
             range_str(out_range()), ": got ", b.describe(), ", expected [", out_local(),
             "] (rank ", rank_, ")");
    bias_ = std::move(b);
    d_bias_ = Tensor();
  }
}

void ColumnParallelLinear::init_normal(float stddev, uint64_t seed, uint64_t tensor_id) {
  weight_ = Tensor::empty({out_local(), in_}, DType::kF32);
  init_normal_sliced(weight_, {out_, in_}, 0, out_range(), stddev, seed, tensor_id);
  if (has_bias_) bias_ = Tensor::zeros({out_local()}, DType::kF32);
  d_weight_ = Tensor();
  d_bias_ = Tensor();
}

void ColumnParallelLinear::check_group(const Communicator& tp, const char* where) const {
  TP_CHECK(tp.size() == int(ranges_.size()) && tp.rank() == rank_, "[", where, "] group ",
           tp.name(), " rank ", tp.rank(), " of ", tp.size(), ", expected rank ", rank_, " of ",
           ranges_.size(), " (the layer's shard)");
}

void ColumnParallelLinear::forward(MatmulEngine& eng, Tensor& out, const Tensor& in) const {
  TP_CHECK(in.ndim() >= 1 && in.dim(-1) == in_ && out.ndim() == in.ndim() &&
               out.dim(-1) == out_local(),
           "[ColumnParallelLinear::forward] got in ", in.describe(), ", out ", out.describe(),
           ", expected in (..., ", in_, ") and out (..., ", out_local(), ") (rank ", rank_, ")");
  if (out.numel() == 0) return;  // this rank owns no rows (tp > out_features) or no tokens
  matmul_forward(eng, out, in, weight_, has_bias_ ? &bias_ : nullptr);
}

void ColumnParallelLinear::forward_gathered(MatmulEngine& eng, Tensor& out, const Tensor& in,
                                            Communicator& tp) const {
  check_group(tp, "ColumnParallelLinear::forward_gathered");
  TP_CHECK(out.ndim() >= 1 && out.dim(-1) == out_, "[ColumnParallelLinear::forward_gathered] out: got ",
           out.describe(), ", expected last dim ", out_);
  if (tp.size() == 1) return forward(eng, out, in);
  Shape local_shape = out.shape();
  local_shape.back() = out_local();
  Tensor local = Tensor::empty(local_shape, DType::kF32);
  forward(eng, local, in);
  gather_from_tp_region_forward(out, local, tp, ranges_);
}

void ColumnParallelLinear::backward_partial(MatmulEngine& eng, Tensor* d_in, const Tensor& d_out,
                                            const Tensor& in) {
  TP_CHECK(d_out.ndim() == in.ndim() && d_out.dim(-1) == out_local() && in.dim(-1) == in_,
           "[ColumnParallelLinear::backward] got d_out ", d_out.describe(), ", in ",
           in.describe(), ", expected d_out (..., ", out_local(), ") and in (..., ", in_,
           ") (rank ", rank_, ")");
  ensure_grad(d_weight_, {out_local(), in_});
  if (has_bias_) ensure_grad(d_bias_, {out_local()});
  if (d_out.numel() == 0) return;
  matmul_backward(eng, d_in, &d_weight_, has_bias_ ? &d_bias_ : nullptr, d_out, in, weight_);
}

void ColumnParallelLinear::backward(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out,
                                    const Tensor& in, Communicator& tp) {
  check_group(tp, "ColumnParallelLinear::backward");
  TP_CHECK(d_in.shape() == in.shape() && d_in.dtype() == DType::kF32 && d_in.is_contiguous(),
           "[ColumnParallelLinear::backward] d_in: got ", d_in.describe(), ", expected f32",
           shape_str(in.shape()), " like in");
  if (d_in.numel() > 0) d_in.fill_zero();
  backward_partial(eng, &d_in, d_out, in);
  copy_to_tp_region_backward(d_in, tp);
}

void ColumnParallelLinear::backward_gathered(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out,
                                             const Tensor& in, Communicator& tp) {
  check_group(tp, "ColumnParallelLinear::backward_gathered");
  if (tp.size() == 1) return backward(eng, d_in, d_out, in, tp);
  Shape local_shape = d_out.shape();
  TP_CHECK(!local_shape.empty(), "[ColumnParallelLinear::backward_gathered] d_out: got ",
           d_out.describe());
  local_shape.back() = out_local();
  Tensor d_local = Tensor::empty(local_shape, DType::kF32);
  gather_from_tp_region_backward(d_local, d_out, tp, ranges_);
  backward(eng, d_in, d_local, in, tp);
}

}  // namespace tensorpar

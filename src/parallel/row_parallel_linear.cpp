// RowParallelLinear (see row_parallel_linear.h).
#include "parallel/row_parallel_linear.h"

#include <algorithm>
#include <utility>

#include "core/error.h"
#include "parallel/mappings.h"
#include "parallel/rng.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

namespace {

// dst (rows, W) columns [c0, c0 + w) = src (rows, w); both f32 with unit column stride.
void copy_columns(Tensor dst, int64_t c0, const Tensor& src) {
  const int64_t rows = src.dim(0), w = src.dim(1);
  const int64_t ds = dst.strides()[0], ss = src.strides()[0];
  float* d = dst.data<float>() + c0;
  const float* x = src.data<float>();
  for (int64_t r = 0; r < rows; ++r) std::copy(x + r * ss, x + r * ss + w, d + r * ds);
}

}  // namespace

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features, bool has_bias,
                                     int tp_size, int tp_rank)
    : RowParallelLinear(in_features, out_features, has_bias,
                        partition_even_all(in_features, tp_size), tp_rank) {}

RowParallelLinear::RowParallelLinear(int64_t in_features, int64_t out_features, bool has_bias,
                                     std::vector<Range> in_ranges, int tp_rank)
    : in_(in_features), out_(out_features), has_bias_(has_bias), ranges_(std::move(in_ranges)),
      rank_(tp_rank) {
  TP_CHECK(in_ >= 1 && out_ >= 1, "[RowParallelLinear] features: got in ", in_, " out ", out_,
           ", expected >= 1");
  TP_CHECK(ranges_tile(ranges_, in_), "[RowParallelLinear] in_ranges must tile [0, ", in_,
           ") in rank order (", ranges_.size(), " ranges)");
  TP_CHECK(rank_ >= 0 && rank_ < int(ranges_.size()), "[RowParallelLinear] tp_rank: got ", rank_,
           ", expected in [0, ", ranges_.size(), ")");
  weight_ = Tensor::zeros({out_, in_local()}, DType::kF32);
  if (has_bias_) bias_ = Tensor::zeros({out_}, DType::kF32);
}

void RowParallelLinear::zero_grad() {
  if (d_weight_.numel() > 0) d_weight_.fill_zero();
  if (d_bias_.numel() > 0) d_bias_.fill_zero();
}

void RowParallelLinear::hold_whole_rows(Communicator& tp) {
  TP_CHECK(tp.size() == int(ranges_.size()) && tp.rank() == rank_, "[RowParallelLinear::hold_whole_rows] group ",
           tp.name(), " rank ", tp.rank(), " of ", tp.size(), ", expected rank ", rank_, " of ", ranges_.size());
  whole_rows_ = &tp;
  weight_ = Tensor::zeros({out_range().size(), in_}, DType::kF32);
  d_weight_ = Tensor();
}

Range RowParallelLinear::out_range() const {
  return whole_rows_ ? partition_even(out_, int(ranges_.size()), rank_) : Range{0, out_};
}

void RowParallelLinear::load(const SliceLoader& weight, const SliceLoader& bias) {
  if (whole_rows_) {
    Tensor w = weight(0, out_range());
    TP_CHECK(w.shape() == (Shape{out_range().size(), in_}), "[RowParallelLinear::load] weight rows ",
             range_str(out_range()), ": got ", w.describe(), ", expected ", shape_str({out_range().size(), in_}),
             " (rank ", rank_, ")");
    weight_ = std::move(w);
  } else {
    Tensor w = weight(1, in_range());
    TP_CHECK(w.shape() == (Shape{out_, in_local()}), "[RowParallelLinear::load] weight columns ",
             range_str(in_range()), ": got ", w.describe(), ", expected ",
             shape_str({out_, in_local()}), " (rank ", rank_, ")");
    weight_ = std::move(w);
  }
  d_weight_ = Tensor();
  if (has_bias_) {
    TP_CHECK(bool(bias), "[RowParallelLinear::load] the layer has a bias but no bias loader");
    Tensor b = as_f32(bias(0, Range{0, out_}));
    TP_CHECK(b.shape() == (Shape{out_}), "[RowParallelLinear::load] bias: got ", b.describe(),
             ", expected [", out_, "]");
    bias_ = std::move(b);
    d_bias_ = Tensor();
  }
}

void RowParallelLinear::init_normal(float stddev, uint64_t seed, uint64_t tensor_id) {
  TP_CHECK(!whole_rows_, "[RowParallelLinear::init_normal] a layer holding whole rows is for inference: load it");
  weight_ = Tensor::empty({out_, in_local()}, DType::kF32);
  init_normal_sliced(weight_, {out_, in_}, 1, in_range(), stddev, seed, tensor_id);
  if (has_bias_) bias_ = Tensor::zeros({out_}, DType::kF32);
  d_weight_ = Tensor();
  d_bias_ = Tensor();
}

void RowParallelLinear::forward_partial(MatmulEngine& eng, Tensor& out, const Tensor& in) const {
  TP_CHECK(in.ndim() >= 1 && in.dim(-1) == in_local() && out.ndim() == in.ndim() &&
               out.dim(-1) == out_ && out.dtype() == DType::kF32 && out.is_contiguous(),
           "[RowParallelLinear::forward] got in ", in.describe(), ", out ", out.describe(),
           ", expected in (..., ", in_local(), ") and contiguous f32 out (..., ", out_,
           ") (rank ", rank_, ")");
  if (out.numel() == 0) return;
  if (whole_rows_) return forward_whole_rows(eng, out, in);
  if (in_local() == 0) {  // this rank owns no columns: its partial sum is zero
    out.fill_zero();
    return;
  }
  matmul_forward(eng, out, in, weight_, nullptr);
}

void RowParallelLinear::forward_whole_rows(MatmulEngine& eng, Tensor& out, const Tensor& in) const {
  // Every rank of the group calls this for every call of the layer (the rows are the same on all
  // of them: an MoE expert's routed rows too, the router being replicated), so the all-gather
  // below is matched. Its buffers are this call's own: kept per layer they would hold the
  // largest prefill's gathered input in every layer.
  // Gather the input's columns from every rank: uneven shards travel padded to the widest.
  const int64_t rows = out.numel() / out_;
  const int n = int(ranges_.size());
  int64_t widest = 0;
  for (const Range& r : ranges_) widest = std::max(widest, r.size());
  TP_CHECK(in.dtype() == DType::kF32, "[RowParallelLinear::forward] whole rows gather f32 input, got ", in.describe(),
           " (rank ", rank_, ")");
  const Tensor x = in.contiguous();
  Tensor mine = x;  // sent as it is when this rank's shard is the widest
  if (in_local() < widest) {
    mine = Tensor::empty({rows, widest}, DType::kF32);
    if (in_local() > 0) copy_columns(mine, 0, x.reshape({rows, in_local()}));
  }
  Tensor all = Tensor::empty({rows * n, widest}, DType::kF32);
  whole_rows_->all_gather(mine.raw(), all.raw(), rows * widest, DType::kF32);
  Tensor full = Tensor::empty({rows, in_}, DType::kF32);
  for (int r = 0; r < n; ++r)
    if (ranges_[size_t(r)].size() > 0)
      copy_columns(full, ranges_[size_t(r)].begin,
                   all.slice(0, r * rows, (r + 1) * rows).slice(1, 0, ranges_[size_t(r)].size()));
  // This rank's outputs over the whole of K; zeros in the others' columns.
  out.fill_zero();
  const Range own = out_range();
  if (own.size() == 0) return;
  Tensor y = Tensor::empty({rows, own.size()}, DType::kF32);
  matmul_forward(eng, y, full, weight_, nullptr);
  copy_columns(out.reshape({rows, out_}), own.begin, y);
}

void RowParallelLinear::add_bias(Tensor& out) const {
  if (!has_bias_ || out.numel() == 0) return;
  TP_CHECK(out.dim(-1) == out_ && out.dtype() == DType::kF32 && out.is_contiguous(),
           "[RowParallelLinear::add_bias] out: got ", out.describe(), ", expected f32 (..., ",
           out_, ")");
  float* o = out.data<float>();
  const float* b = bias_.data<float>();
  const int64_t rows = out.numel() / out_;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < out_; ++j) o[r * out_ + j] += b[j];
}

void RowParallelLinear::forward(MatmulEngine& eng, Tensor& out, const Tensor& in,
                                Communicator& tp) const {
  TP_CHECK(tp.size() == int(ranges_.size()) && tp.rank() == rank_, "[RowParallelLinear::forward] group ",
           tp.name(), " rank ", tp.rank(), " of ", tp.size(), ", expected rank ", rank_, " of ",
           ranges_.size(), " (the layer's shard)");
  forward_partial(eng, out, in);
  reduce_from_tp_region_forward(out, tp);
  add_bias(out);
}

void RowParallelLinear::backward(MatmulEngine& eng, Tensor* d_in, const Tensor& d_out,
                                 const Tensor& in) {
  TP_CHECK(d_out.ndim() == in.ndim() && d_out.dim(-1) == out_ && in.dim(-1) == in_local(),
           "[RowParallelLinear::backward] got d_out ", d_out.describe(), ", in ", in.describe(),
           ", expected d_out (..., ", out_, ") and in (..., ", in_local(), ") (rank ", rank_, ")");
  TP_CHECK(!whole_rows_, "[RowParallelLinear::backward] a layer holding whole rows (tp_invariant) is for "
           "inference only");
  ensure_grad(d_weight_, {out_, in_local()});
  if (has_bias_) ensure_grad(d_bias_, {out_});
  if (d_out.numel() == 0) return;
  if (in_local() == 0) {  // no weight columns: only the bias gradient
    if (has_bias_) {
      float* db = d_bias_.data<float>();
      const Tensor g = d_out.contiguous();
      const float* dy = g.data<float>();
      for (int64_t r = 0; r < g.numel() / out_; ++r)
        for (int64_t j = 0; j < out_; ++j) db[j] += dy[r * out_ + j];
    }
    return;
  }
  matmul_backward(eng, d_in, &d_weight_, has_bias_ ? &d_bias_ : nullptr, d_out, in, weight_);
}

}  // namespace tensorpar

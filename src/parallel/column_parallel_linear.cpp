// ColumnParallelLinear (see column_parallel_linear.h).
#include "parallel/column_parallel_linear.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "kernels/cpu/packed_weights.h"
#include "parallel/mappings.h"
#include "parallel/rng.h"

namespace tensorpar {

namespace {

// Whether ranges (one per rank) are in rank order, cover [0, out) without gaps, and only repeat
// (replicas) or stay empty beside tiling.
bool ranges_cover(std::span<const Range> ranges, int64_t out) {
  int64_t covered = 0;
  for (const Range& r : ranges) {
    if (r.begin < 0 || r.end < r.begin || r.end > out) return false;
    if (r.empty()) continue;
    if (r.begin > covered) return false;
    covered = std::max(covered, r.end);
  }
  return covered == out;
}

// Several (rows_i, in) tensors of one dtype, their rows stacked into one tensor.
Tensor stack_rows(std::span<const Tensor> parts, int64_t in) {
  int64_t rows = 0;
  for (const Tensor& t : parts) rows += t.dim(0);
  const DType dt = parts.front().dtype();
  Tensor out = Tensor::empty({rows, in}, dt);
  const size_t row_bytes = size_t(dtype_nbytes(dt, in));
  auto* dst = static_cast<uint8_t*>(out.raw());
  for (const Tensor& t : parts) {
    if (t.numel() == 0) continue;
    const Tensor c = t.contiguous();
    std::memcpy(dst, c.raw(), size_t(t.dim(0)) * row_bytes);
    dst += size_t(t.dim(0)) * row_bytes;
  }
  return out;
}

}  // namespace

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           bool has_bias, int tp_size, int tp_rank)
    : ColumnParallelLinear(in_features, out_features, has_bias,
                           partition_even_all(out_features, tp_size), tp_rank) {}

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, int64_t out_features,
                                           bool has_bias, std::vector<Range> out_ranges,
                                           int tp_rank)
    : in_(in_features), has_bias_(has_bias), rank_(tp_rank) {
  TP_CHECK(ranges_tile(out_ranges, out_features), "[ColumnParallelLinear] out_ranges must tile [0, ",
           out_features, ") in rank order (", out_ranges.size(), " ranges)");
  init_parts({ColumnPart{out_features, std::move(out_ranges)}});
}

ColumnParallelLinear::ColumnParallelLinear(int64_t in_features, std::vector<ColumnPart> parts,
                                           bool has_bias, int tp_rank)
    : in_(in_features), has_bias_(has_bias), rank_(tp_rank) {
  init_parts(std::move(parts));
}

void ColumnParallelLinear::init_parts(std::vector<ColumnPart> parts) {
  TP_CHECK(in_ >= 1 && !parts.empty(), "[ColumnParallelLinear] got in ", in_, " and ", parts.size(),
           " parts, expected in >= 1 and at least one part");
  const size_t n_ranks = parts.front().ranges.size();
  TP_CHECK(rank_ >= 0 && size_t(rank_) < n_ranks, "[ColumnParallelLinear] tp_rank: got ", rank_,
           ", expected in [0, ", n_ranks, ")");
  for (size_t i = 0; i < parts.size(); ++i) {
    const ColumnPart& p = parts[i];
    TP_CHECK(p.out >= 1 && p.ranges.size() == n_ranks && ranges_cover(p.ranges, p.out),
             "[ColumnParallelLinear] part ", i, ": ", p.ranges.size(), " ranges over ", p.out,
             " rows, expected ", n_ranks, " in rank order covering [0, ", p.out, ")");
  }
  parts_ = std::move(parts);
  out_local_ = 0;
  for (size_t i = 0; i < parts_.size(); ++i) {
    offsets_.push_back(out_local_);
    out_local_ += part_range(int64_t(i)).size();
  }
  segments_ = {Segment{0, out_local_, Tensor::zeros({out_local_, in_}, DType::kF32)}};
  if (has_bias_) bias_ = Tensor::zeros({out_local_}, DType::kF32);
  views_w_.resize(parts_.size()), views_b_.resize(parts_.size());
  views_dw_.resize(parts_.size()), views_db_.resize(parts_.size());
}

int ColumnParallelLinear::part_copies(int64_t i) const {
  const Range mine = part_range(i);
  int n = 0;
  for (const Range& r : parts_[size_t(i)].ranges) n += r == mine;
  return n;
}

Tensor& ColumnParallelLinear::weight() {
  TP_CHECK(segments_.size() == 1, "[ColumnParallelLinear] the weight is ", segments_.size(),
           " segments of different dtypes (inference only)");
  return segments_.front().w;
}

const Tensor& ColumnParallelLinear::weight() const {
  return const_cast<ColumnParallelLinear*>(this)->weight();
}

int64_t ColumnParallelLinear::weight_bytes() const {
  int64_t n = has_bias_ ? bias_.nbytes() : 0;
  for (const Segment& s : segments_) n += s.w.nbytes();
  return n;
}

void ColumnParallelLinear::set_row_packed(bool on) {
  for (Segment& s : segments_) s.w = row_packed_as(s.w, on);
  views_w_.assign(views_w_.size(), Tensor());  // views of the old layout would keep it alive
}

void ColumnParallelLinear::zero_grad() {
  if (d_weight_.numel() > 0) d_weight_.fill_zero();
  if (d_bias_.numel() > 0) d_bias_.fill_zero();
}

const ColumnParallelLinear::Segment& ColumnParallelLinear::segment_of(int64_t part) const {
  const int64_t row = offsets_[size_t(part)];
  for (const Segment& s : segments_)
    if (row >= s.row0 && row < s.row0 + s.rows) return s;
  return segments_.back();  // an empty part
}

namespace {

// `view` itself when it already is `fresh` (the same data, shape and dtype), else replaced by it.
// An unchanged view is never rewritten: another thread may be reading it (a communication
// thread packing the gradients it points to).
Tensor& keep_or_replace(Tensor& view, Tensor fresh) {
  const bool same = view.defined() == fresh.defined() && view.raw() == fresh.raw() &&
                    view.shape() == fresh.shape() && view.dtype() == fresh.dtype();
  if (!same) view = std::move(fresh);
  return view;
}

}  // namespace

Tensor& ColumnParallelLinear::part_weight(int64_t i) {
  const Segment& s = segment_of(i);
  const int64_t r0 = offsets_[size_t(i)] - s.row0;
  return keep_or_replace(views_w_[size_t(i)],
                         s.w.slice(0, std::max<int64_t>(0, r0), std::max<int64_t>(0, r0) + part_range(i).size()));
}

Tensor& ColumnParallelLinear::part_bias(int64_t i) {
  const int64_t r0 = offsets_[size_t(i)];
  return keep_or_replace(views_b_[size_t(i)], has_bias_ ? bias_.slice(0, r0, r0 + part_range(i).size()) : Tensor());
}

Tensor& ColumnParallelLinear::part_d_weight(int64_t i) {
  ensure_grad(d_weight_, {out_local_, in_});
  const int64_t r0 = offsets_[size_t(i)];
  return keep_or_replace(views_dw_[size_t(i)], d_weight_.slice(0, r0, r0 + part_range(i).size()));
}

Tensor& ColumnParallelLinear::part_d_bias(int64_t i) {
  if (!has_bias_) return keep_or_replace(views_db_[size_t(i)], Tensor());
  ensure_grad(d_bias_, {out_local_});
  const int64_t r0 = offsets_[size_t(i)];
  return keep_or_replace(views_db_[size_t(i)], d_bias_.slice(0, r0, r0 + part_range(i).size()));
}

void ColumnParallelLinear::load(std::span<const SliceLoader> weights, std::span<const SliceLoader> biases) {
  TP_CHECK(weights.size() == parts_.size(), "[ColumnParallelLinear::load] ", weights.size(),
           " weight loaders for ", parts_.size(), " parts");
  TP_CHECK(has_bias_ ? biases.size() == parts_.size() : biases.empty(), "[ColumnParallelLinear::load] ",
           biases.size(), " bias loaders, the layer ", has_bias_ ? "has a bias per part" : "has no bias");
  std::vector<Tensor> w(parts_.size());
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Range r = part_range(int64_t(i));
    if (r.empty()) {
      w[i] = Tensor::zeros({0, in_}, DType::kF32);
      continue;
    }
    w[i] = weights[i](0, r);
    TP_CHECK(w[i].shape() == (Shape{r.size(), in_}), "[ColumnParallelLinear::load] part ", i, " rows ",
             range_str(r), ": got ", w[i].describe(), ", expected ", shape_str({r.size(), in_}), " (rank ",
             rank_, ")");
  }
  // Consecutive parts of one dtype become one segment (one GEMM); empty parts join any.
  std::vector<Segment> segs;
  for (size_t i = 0; i < parts_.size();) {
    size_t j = i + 1;
    DType dt = w[i].dtype();
    int64_t rows = w[i].dim(0);
    for (; j < parts_.size(); ++j) {
      if (w[j].dim(0) == 0) continue;
      if (rows == 0) dt = w[j].dtype();
      if (w[j].dtype() != dt) break;
      rows += w[j].dim(0);
    }
    std::vector<Tensor> group;
    for (size_t k = i; k < j; ++k)
      if (w[k].dim(0) > 0) group.push_back(w[k]);
    if (group.empty()) group.push_back(w[i]);
    Segment s;
    s.row0 = offsets_[i];
    s.rows = rows;
    s.w = group.size() == 1 ? group.front() : stack_rows(group, in_);
    segs.push_back(std::move(s));
    i = j;
  }
  segments_ = std::move(segs);
  d_weight_ = Tensor();
  if (has_bias_) {
    Tensor b = Tensor::empty({out_local_}, DType::kF32);
    for (size_t i = 0; i < parts_.size(); ++i) {
      const Range r = part_range(int64_t(i));
      if (r.empty()) continue;
      const Tensor bi = as_f32(biases[i](0, r));
      TP_CHECK(bi.shape() == (Shape{r.size()}), "[ColumnParallelLinear::load] part ", i, " bias rows ",
               range_str(r), ": got ", bi.describe(), ", expected [", r.size(), "] (rank ", rank_, ")");
      b.slice(0, offsets_[i], offsets_[i] + r.size()).copy_from(bi);
    }
    bias_ = std::move(b);
    d_bias_ = Tensor();
  }
}

void ColumnParallelLinear::load(const SliceLoader& weight, const SliceLoader& bias) {
  TP_CHECK(parts_.size() == 1, "[ColumnParallelLinear::load] one loader for ", parts_.size(), " parts");
  TP_CHECK(!has_bias_ || bool(bias), "[ColumnParallelLinear::load] the layer has a bias but no bias loader");
  const SliceLoader w[1] = {weight}, b[1] = {bias};
  load(w, has_bias_ ? std::span<const SliceLoader>(b) : std::span<const SliceLoader>());
}

void ColumnParallelLinear::init_normal(float stddev, uint64_t seed, std::span<const uint64_t> tensor_ids) {
  TP_CHECK(tensor_ids.size() == parts_.size(), "[ColumnParallelLinear::init_normal] ", tensor_ids.size(),
           " tensor ids for ", parts_.size(), " parts");
  segments_ = {Segment{0, out_local_, Tensor::empty({out_local_, in_}, DType::kF32)}};
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Range r = part_range(int64_t(i));
    if (r.empty()) continue;
    Tensor rows = segments_.front().w.slice(0, offsets_[i], offsets_[i] + r.size());
    init_normal_sliced(rows, {parts_[i].out, in_}, 0, r, stddev, seed, tensor_ids[i]);
  }
  if (has_bias_) bias_ = Tensor::zeros({out_local_}, DType::kF32);
  d_weight_ = Tensor();
  d_bias_ = Tensor();
}

void ColumnParallelLinear::init_normal(float stddev, uint64_t seed, uint64_t tensor_id) {
  const uint64_t ids[1] = {tensor_id};
  init_normal(stddev, seed, ids);
}

void ColumnParallelLinear::check_group(const Communicator& tp, const char* where) const {
  TP_CHECK(tp.size() == int(parts_.front().ranges.size()) && tp.rank() == rank_, "[", where, "] group ",
           tp.name(), " rank ", tp.rank(), " of ", tp.size(), ", expected rank ", rank_, " of ",
           parts_.front().ranges.size(), " (the layer's shard)");
}

void ColumnParallelLinear::forward(MatmulEngine& eng, Tensor& out, const Tensor& in) const {
  TP_CHECK(in.ndim() >= 1 && in.dim(-1) == in_ && out.ndim() == in.ndim() && out.dim(-1) == out_local_,
           "[ColumnParallelLinear::forward] got in ", in.describe(), ", out ", out.describe(),
           ", expected in (..., ", in_, ") and out (..., ", out_local_, ") (rank ", rank_, ")");
  if (out.numel() == 0) return;  // this rank owns no rows (tp > out_features) or no tokens
  if (segments_.size() == 1) return matmul_forward(eng, out, in, segments_.front().w, has_bias_ ? &bias_ : nullptr);
  TP_CHECK(in.ndim() == 2, "[ColumnParallelLinear::forward] a weight of mixed dtypes takes 2-D input, got ",
           in.describe());
  for (const Segment& s : segments_) {
    if (s.rows == 0) continue;
    Tensor o = out.slice(1, s.row0, s.row0 + s.rows);
    const Tensor b = has_bias_ ? bias_.slice(0, s.row0, s.row0 + s.rows) : Tensor();
    matmul_forward(eng, o, in, s.w, has_bias_ ? &b : nullptr);
  }
}

void ColumnParallelLinear::check_backward(const Tensor& d_out, const Tensor& in, const char* where) const {
  TP_CHECK(d_out.ndim() == in.ndim() && d_out.dim(-1) == out_local_ && in.dim(-1) == in_, "[", where,
           "] got d_out ", d_out.describe(), ", in ", in.describe(), ", expected d_out (..., ", out_local_,
           ") and in (..., ", in_, ") (rank ", rank_, ")");
  TP_CHECK(segments_.size() == 1, "[", where, "] the weight is ", segments_.size(),
           " segments of different dtypes: inference only");
}

void ColumnParallelLinear::backward_partial(MatmulEngine& eng, Tensor* d_in, const Tensor& d_out, const Tensor& in) {
  check_backward(d_out, in, "ColumnParallelLinear::backward");
  ensure_grad(d_weight_, {out_local_, in_});
  if (has_bias_) ensure_grad(d_bias_, {out_local_});
  if (d_out.numel() == 0) return;
  matmul_backward(eng, d_in, &d_weight_, has_bias_ ? &d_bias_ : nullptr, d_out, in, segments_.front().w);
}

void ColumnParallelLinear::backward_input(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out,
                                          const Tensor& in) const {
  check_backward(d_out, in, "ColumnParallelLinear::backward_input");
  if (d_out.numel() == 0) return;
  matmul_backward(eng, &d_in, nullptr, nullptr, d_out, in, segments_.front().w);
}

void ColumnParallelLinear::backward_weight(MatmulEngine& eng, const Tensor& d_out, const Tensor& in) {
  backward_partial(eng, nullptr, d_out, in);
}

void ColumnParallelLinear::backward(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out,
                                    const Tensor& in, Communicator& tp, CommThread* async) {
  check_group(tp, "ColumnParallelLinear::backward");
  TP_CHECK(d_in.shape() == in.shape() && d_in.dtype() == DType::kF32 && d_in.is_contiguous(),
           "[ColumnParallelLinear::backward] d_in: got ", d_in.describe(), ", expected f32",
           shape_str(in.shape()), " like in");
  if (d_in.numel() > 0) d_in.fill_zero();
  if (async == nullptr || tp.size() == 1) {
    backward_partial(eng, &d_in, d_out, in);
    copy_to_tp_region_backward(d_in, tp);
    return;
  }
  TP_CHECK(async->size() == tp.size() && async->rank() == tp.rank(), "[ColumnParallelLinear::backward] async: a ",
           async->size(), "-rank CommThread (rank ", async->rank(), ") for the ", tp.size(), "-rank ", tp.name(),
           " group (rank ", tp.rank(), ")");
  backward_input(eng, d_in, d_out, in);
  QueuedOp reduce(*async, [&d_in](Communicator& c) { copy_to_tp_region_backward(d_in, c); });
  reduce.start();
  backward_weight(eng, d_out, in);
  reduce.finish();
}

}  // namespace tensorpar

#include "train/distributed_optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/sum_squares.h"

namespace tensorpar {

DistributedAdamW::DistributedAdamW(const std::vector<ParamShard>& params, Communicator& dp, int64_t bucket,
                                   const std::vector<std::string>& held)
    : dp_(dp) {
  TP_CHECK(bucket >= 1, "[DistributedAdamW] bucket ", bucket, ", expected >= 1");
  slots_.resize(params.size());
  std::vector<size_t> order;
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamShard& p = params[i];
    TP_CHECK(!p.expert, "[DistributedAdamW] '", p.name,
             "' is an expert shard (expert parallelism): the distributed optimizer covers dense models");
    if (!p.grad) continue;
    TP_CHECK(p.value->dtype() == DType::kF32 && p.value->is_contiguous(), "[DistributedAdamW] parameter '",
             p.name, "' is ", p.value->describe(), ", expected contiguous f32 master weights");
    slots_[i].numel = p.value->numel(), slots_[i].copies = p.copies;
    slots_[i].part = std::find(held.begin(), held.end(), p.name) != held.end() ? kHeldGrads : p.grad_part;
    order.push_back(i);
  }
  // The flat space in backward's order, so that a bucket's gradients are final together.
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return backward_position(slots_[a].part) < backward_position(slots_[b].part);
  });
  for (size_t i : order) slots_[i].offset = total_, total_ += slots_[i].numel;
  // Every DP rank must lay out the same space (same shards, same order).
  int64_t check[2] = {total_, -total_};
  dp_.all_reduce(check, check, 2, DType::kI64, ReduceOp::kMax);
  TP_CHECK(check[0] == total_ && -check[1] == total_, "[DistributedAdamW] the data-parallel ranks hold ",
           -check[1], " to ", check[0], " trainable elements: their parameters differ");
  chunk_ = std::max<int64_t>(1, (total_ + dp_.size() - 1) / dp_.size());
  bucket_ = std::min(bucket, chunk_);
  send_.assign(size_t(staging_floats()), 0.0f);
  recv_.assign(size_t(staging_floats()), 0.0f);
  m_.assign(size_t(chunk_), 0.0f);
  v_.assign(size_t(chunk_), 0.0f);
}

template <typename F>
void DistributedAdamW::for_range(const std::vector<ParamShard>& params, int64_t lo, int64_t hi, F&& fn) const {
  TP_CHECK(params.size() == slots_.size(), "[DistributedAdamW] ", params.size(), " parameters, laid out for ",
           slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    const int64_t a = std::max(s.offset, lo), b = std::min(s.offset + s.numel, hi);
    if (s.numel > 0 && a < b) fn(i, a - s.offset, a - lo, b - a);
  }
}

void DistributedAdamW::gather_flat(const std::vector<ParamShard>& params, bool gradient, int64_t lo, int64_t n,
                                   float* dst) const {
  std::fill(dst, dst + n, 0.0f);  // past the end: the last chunk's padding
  for_range(params, lo, lo + n, [&](size_t i, int64_t p0, int64_t off, int64_t k) {
    const Tensor& t = gradient ? *params[i].grad : *params[i].value;
    std::memcpy(dst + off, t.data<float>() + p0, size_t(k) * sizeof(float));
  });
}

void DistributedAdamW::scatter_flat(const std::vector<ParamShard>& params, bool gradient, int64_t lo, int64_t n,
                                    const float* src) const {
  for_range(params, lo, lo + n, [&](size_t i, int64_t p0, int64_t off, int64_t k) {
    Tensor& t = gradient ? *params[i].grad : *params[i].value;
    std::memcpy(t.data<float>() + p0, src + off, size_t(k) * sizeof(float));
  });
}

template <typename F>
void DistributedAdamW::for_chunk(const std::vector<ParamShard>& params, F&& fn) const {
  for (int64_t j = 0; j < buckets(); ++j) {
    const int64_t n = bucket_size(j), lo = bucket_flat(j) + dp_.rank() * n;
    for_range(params, lo, lo + n,
              [&](size_t i, int64_t p0, int64_t off, int64_t k) { fn(i, p0, bucket_begin(j) + off, k); });
  }
}

void DistributedAdamW::reduce_bucket(const std::vector<ParamShard>& params, int64_t j, Communicator& dp, float* send,
                                     float* recv) const {
  TP_CHECK(j >= 0 && j < buckets(), "[DistributedAdamW] bucket ", j, " of ", buckets());
  // The bucket's dp pieces are one contiguous range of the flat space; this rank's sums go back
  // into its own piece only after the collective.
  const int64_t n = bucket_size(j);
  gather_flat(params, true, bucket_flat(j), n * dp.size(), send);
  dp.reduce_scatter(send, recv, n, DType::kF32, ReduceOp::kSum);
  scatter_flat(params, true, bucket_flat(j) + dp.rank() * n, n, recv);
}

void DistributedAdamW::reduce_gradients(const std::vector<ParamShard>& params) {
  for (int64_t j = 0; j < buckets(); ++j) reduce_bucket(params, j, dp_, send_.data(), recv_.data());
}

std::vector<int64_t> DistributedAdamW::bucket_parts(const std::vector<ParamShard>& params, int64_t j) const {
  std::vector<int64_t> parts;
  for_range(params, bucket_flat(j), bucket_flat(j) + bucket_size(j) * dp_.size(),
            [&](size_t i, int64_t, int64_t, int64_t) {
              if (std::find(parts.begin(), parts.end(), slots_[i].part) == parts.end()) parts.push_back(slots_[i].part);
            });
  return parts;
}

double DistributedAdamW::clip(const std::vector<ParamShard>& params, Communicator& tp, double max_norm,
                              Communicator* pp) {
  double mine = 0;
  for_chunk(params, [&](size_t i, int64_t p0, int64_t, int64_t n) {
    const float* g = params[i].grad->data<float>() + p0;
    mine += sum_of_squares(g, n) / double(slots_[i].copies);
  });
  // This TP rank's whole sum: the DP ranks' chunk sums, gathered bitwise and added in rank order.
  std::vector<double> all(size_t(dp_.size()));
  dp_.all_gather(&mine, all.data(), int64_t(sizeof(double)), DType::kU8);
  double local[2] = {0, 0};
  for (double x : all) local[0] += x;
  const double norm = combine_grad_norm(local, tp, pp);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    const float scale = float(max_norm / (norm + 1e-6));
    for_chunk(params, [&](size_t i, int64_t p0, int64_t, int64_t n) {
      scale_array(params[i].grad->data<float>() + p0, scale, n);
    });
  }
  return norm;
}

void DistributedAdamW::step(const std::vector<ParamShard>& params, AdamW& opt, float lr) {
  opt.set_steps(opt.steps() + 1);
  AdamWConfig cfg = opt.config();
  cfg.lr = lr;
  for_chunk(params, [&](size_t i, int64_t p0, int64_t c, int64_t n) {
    adamw_step(params[i].value->data<float>() + p0, m_.data() + c, v_.data() + c,
               params[i].grad->data<float>() + p0, n, opt.steps(), cfg);
  });
  // Every rank's updated pieces to every rank, bucket by bucket.
  for (int64_t j = 0; j < buckets(); ++j) {
    const int64_t n = bucket_size(j), flat = bucket_flat(j);
    gather_flat(params, false, flat + dp_.rank() * n, n, send_.data());
    dp_.all_gather(send_.data(), recv_.data(), n, DType::kF32);
    for (int r = 0; r < dp_.size(); ++r)
      if (r != dp_.rank()) scatter_flat(params, false, flat + r * n, n, recv_.data() + r * n);
  }
}

void DistributedAdamW::export_state(const std::vector<ParamShard>& params, AdamW& opt) {
  for (const std::vector<float>* moment : {&m_, &v_}) {
    for (int64_t j = 0; j < buckets(); ++j) {
      const int64_t n = bucket_size(j), flat = bucket_flat(j);
      dp_.all_gather(moment->data() + bucket_begin(j), recv_.data(), n, DType::kF32);
      for (int r = 0; r < dp_.size(); ++r)
        for_range(params, flat + r * n, flat + (r + 1) * n, [&](size_t i, int64_t p0, int64_t off, int64_t c) {
          AdamWState& s = opt.state(params[i]);
          Tensor& t = moment == &m_ ? s.exp_avg : s.exp_avg_sq;
          std::memcpy(t.data<float>() + p0, recv_.data() + r * n + off, size_t(c) * sizeof(float));
        });
    }
  }
}

void DistributedAdamW::import_state(const std::vector<ParamShard>& params, AdamW& opt) {
  std::fill(m_.begin(), m_.end(), 0.0f);
  std::fill(v_.begin(), v_.end(), 0.0f);
  for_chunk(params, [&](size_t i, int64_t p0, int64_t c, int64_t n) {
    if (!opt.has_state(params[i].name)) return;  // a checkpoint without moments: they start at zero
    AdamWState& s = opt.state(params[i]);
    std::memcpy(m_.data() + c, s.exp_avg.data<float>() + p0, size_t(n) * sizeof(float));
    std::memcpy(v_.data() + c, s.exp_avg_sq.data<float>() + p0, size_t(n) * sizeof(float));
  });
  opt.clear_state();
}

}  // namespace tensorpar

// GradientBuckets (see gradient_buckets.h).
#include "train/gradient_buckets.h"

#include <algorithm>
#include <cstring>

#include "comm/timed_communicator.h"
#include "core/error.h"

namespace tensorpar {

GradientBuckets::GradientBuckets(const std::vector<ParamShard>& params, Communicator& dp, Communicator* edp,
                                 int64_t bucket_bytes) {
  TP_CHECK(bucket_bytes >= 1, "[GradientBuckets] bucket size ", bucket_bytes, " bytes, expected >= 1");
  const bool experts = std::any_of(params.begin(), params.end(), [](const ParamShard& p) { return p.expert; });
  TP_CHECK(!experts || edp, "[GradientBuckets] expert parameters need the expert-data-parallel group");
  threads_.push_back(std::make_unique<CommThread>(dp));
  if (experts) threads_.push_back(std::make_unique<CommThread>(*edp));
  staging_.resize(threads_.size());

  for (const ParamShard& p : params)
    if (p.grad && p.grad->numel() > 0 && threads_[p.expert ? 1 : 0]->size() > 1) params_.push_back(p);
  std::stable_sort(params_.begin(), params_.end(), [](const ParamShard& a, const ParamShard& b) {
    return backward_position(a.grad_part) < backward_position(b.grad_part);
  });
  // Each bucket's group, elements and gradients (indices into params_).
  struct Span {
    int group = 0;
    int64_t elements = 0;
    std::vector<size_t> members;
  };
  const int64_t cap = std::max<int64_t>(1, bucket_bytes / int64_t(sizeof(float)));
  std::vector<Span> spans;
  int64_t open[2] = {-1, -1};  // each group's bucket being filled (dp, edp)
  for (size_t i = 0; i < params_.size(); ++i) {
    const ParamShard& p = params_[i];
    TP_CHECK(p.grad->dtype() == DType::kF32 && p.grad->is_contiguous(), "[GradientBuckets] gradient of ", p.name,
             " is ", p.grad->describe(), ", expected contiguous f32");
    const int g = p.expert ? 1 : 0;
    const int64_t n = p.grad->numel();
    if (open[g] < 0 || spans[size_t(open[g])].elements + n > cap) {
      open[g] = int64_t(spans.size());
      spans.emplace_back();
      spans.back().group = g;
    }
    Span& span = spans[size_t(open[g])];
    span.elements += n;
    span.members.push_back(i);
  }
  // Sized first: the buckets keep pointers into the staging buffers.
  for (const Span& span : spans)
    staging_[size_t(span.group)].resize(std::max(staging_[size_t(span.group)].size(), size_t(span.elements)));
  for (Span& span : spans) {
    Bucket b;
    b.group = span.group;
    for (size_t i : span.members)
      if (std::find(b.parts.begin(), b.parts.end(), params_[i].grad_part) == b.parts.end())
        b.parts.push_back(params_[i].grad_part);
    float* staging = staging_[size_t(b.group)].data();
    const std::vector<ParamShard>* ps = &params_;
    b.reduce = [staging, ps, idx = std::move(span.members), elements = span.elements](Communicator& c) {
      int64_t at = 0;
      for (size_t i : idx) {
        const Tensor& g = *(*ps)[i].grad;
        std::memcpy(staging + at, g.data<float>(), size_t(g.numel()) * sizeof(float));
        at += g.numel();
      }
      c.all_reduce(staging, staging, elements, DType::kF32, ReduceOp::kSum);
      at = 0;
      for (size_t i : idx) {
        Tensor& g = *(*ps)[i].grad;
        std::memcpy(g.data<float>(), staging + at, size_t(g.numel()) * sizeof(float));
        at += g.numel();
      }
    };
    buckets_.push_back(std::move(b));
  }
}

GradientBuckets::GradientBuckets(const std::vector<ParamShard>& params, const DistributedAdamW& dist,
                                 Communicator& dp)
    : params_(params) {
  threads_.push_back(std::make_unique<CommThread>(dp));
  staging_.emplace_back(size_t(2 * dist.staging_floats()));
  float* send = staging_[0].data();
  float* recv = send + dist.staging_floats();
  const std::vector<ParamShard>* ps = &params_;
  for (int64_t j = 0; j < dist.buckets(); ++j) {
    Bucket b;
    b.parts = dist.bucket_parts(params_, j);
    b.reduce = [&dist, ps, j, send, recv](Communicator& c) { dist.reduce_bucket(*ps, j, c, send, recv); };
    buckets_.push_back(std::move(b));
  }
}

void GradientBuckets::begin_step(int64_t backwards) {
  TP_CHECK(backwards >= 1, "[GradientBuckets] a step with ", backwards, " backward passes");
  TP_CHECK(next_ == 0 || next_ == buckets_.size(), "[GradientBuckets] a step began before the last one finished");
  backwards_ = backwards;
  reported_.clear();
  next_ = 0;
  launched_early_ = 0;
}

bool GradientBuckets::ready(const Bucket& b) const {
  for (int64_t part : b.parts) {
    const auto it = reported_.find(part);
    if (part == kHeldGrads || it == reported_.end() || it->second < backwards_) return false;
  }
  return true;
}

void GradientBuckets::gradients_done(int64_t part) {
  if (backwards_ == 0) return;  // not in a step (an evaluation, or a model trained without us)
  ++reported_[part];
  // In order: every rank launches the same buckets in the same sequence.
  while (next_ < buckets_.size() && ready(buckets_[next_])) {
    launch(buckets_[next_++]);
    ++launched_early_;
  }
}

void GradientBuckets::launch(const Bucket& b) {
  std::atomic<double>* reduce_s = &reduce_s_[b.group];
  const std::function<void(Communicator&)>* reduce = &b.reduce;
  threads_[size_t(b.group)]->submit([reduce, reduce_s](Communicator& c) {
    TimedCommunicator timed(c);  // the collectives' time, not the packing
    (*reduce)(timed);
    reduce_s->fetch_add(timed.seconds(), std::memory_order_relaxed);
  });
}

void GradientBuckets::finish() {
  while (next_ < buckets_.size()) launch(buckets_[next_++]);
  backwards_ = 0;
  for (auto& t : threads_) t->wait_all();
}

double GradientBuckets::reduce_seconds() const {
  return reduce_s_[0].load(std::memory_order_relaxed) + reduce_s_[1].load(std::memory_order_relaxed);
}

}  // namespace tensorpar

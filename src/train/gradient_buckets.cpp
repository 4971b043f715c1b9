// GradientBuckets (see gradient_buckets.h).
#include "train/gradient_buckets.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"

namespace tensorpar {

namespace {

// Position of a part in backward: the head, the layers from the last, the end.
std::pair<int, int64_t> backward_position(int64_t part) {
  if (part == kHeadGrads) return {0, 0};
  if (part == kEndGrads) return {2, 0};
  return {1, -part};
}

}  // namespace

GradientBuckets::GradientBuckets(const std::vector<ParamShard>& params, Communicator& dp, Communicator* edp,
                                 int64_t bucket_bytes) {
  TP_CHECK(bucket_bytes >= 1, "[GradientBuckets] bucket size ", bucket_bytes, " bytes, expected >= 1");
  const bool experts = std::any_of(params.begin(), params.end(), [](const ParamShard& p) { return p.expert; });
  TP_CHECK(!experts || edp, "[GradientBuckets] expert parameters need the expert-data-parallel group");
  threads_.push_back(std::make_unique<CommThread>(dp));
  if (experts) threads_.push_back(std::make_unique<CommThread>(*edp));
  staging_.resize(threads_.size());

  std::vector<ParamShard> order;
  for (const ParamShard& p : params)
    if (p.grad && p.grad->numel() > 0 && threads_[p.expert ? 1 : 0]->size() > 1) order.push_back(p);
  std::stable_sort(order.begin(), order.end(), [](const ParamShard& a, const ParamShard& b) {
    return backward_position(a.grad_part) < backward_position(b.grad_part);
  });
  const int64_t cap = std::max<int64_t>(1, bucket_bytes / int64_t(sizeof(float)));
  std::vector<int64_t> open(threads_.size(), -1);  // each group's bucket being filled
  for (const ParamShard& p : order) {
    TP_CHECK(p.grad->dtype() == DType::kF32 && p.grad->is_contiguous(), "[GradientBuckets] gradient of ", p.name,
             " is ", p.grad->describe(), ", expected contiguous f32");
    const int g = p.expert ? 1 : 0;
    const int64_t n = p.grad->numel();
    if (open[size_t(g)] < 0 || buckets_[size_t(open[size_t(g)])].elements + n > cap) {
      open[size_t(g)] = int64_t(buckets_.size());
      buckets_.push_back(Bucket{});
      buckets_.back().group = g;
    }
    Bucket& b = buckets_[size_t(open[size_t(g)])];
    b.grads.push_back(p);
    b.elements += n;
    if (std::find(b.parts.begin(), b.parts.end(), p.grad_part) == b.parts.end()) b.parts.push_back(p.grad_part);
  }
  for (const Bucket& b : buckets_)
    staging_[size_t(b.group)].resize(std::max(staging_[size_t(b.group)].size(), size_t(b.elements)));
}

void GradientBuckets::begin_step(int64_t backwards) {
  TP_CHECK(backwards >= 1, "[GradientBuckets] a step with ", backwards, " backward passes");
  TP_CHECK(next_ == 0 || next_ == buckets_.size(), "[GradientBuckets] a step began before the last one finished");
  backwards_ = backwards;
  reported_.clear();
  for (Bucket& b : buckets_) b.launched = false;
  next_ = 0;
  launched_early_ = 0;
}

bool GradientBuckets::ready(const Bucket& b) const {
  for (int64_t part : b.parts) {
    const auto it = reported_.find(part);
    if (it == reported_.end() || it->second < backwards_) return false;
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

void GradientBuckets::launch(Bucket& b) {
  b.launched = true;
  float* staging = staging_[size_t(b.group)].data();
  const std::vector<ParamShard>* grads = &b.grads;
  const int64_t elements = b.elements;
  std::atomic<double>* reduce_s = &reduce_s_[b.group];
  threads_[size_t(b.group)]->submit([staging, grads, elements, reduce_s](Communicator& c) {
    int64_t at = 0;
    for (const ParamShard& p : *grads) {
      std::memcpy(staging + at, p.grad->data<float>(), size_t(p.grad->numel()) * sizeof(float));
      at += p.grad->numel();
    }
    const auto t0 = std::chrono::steady_clock::now();
    c.all_reduce(staging, staging, elements, DType::kF32, ReduceOp::kSum);
    reduce_s->fetch_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                        std::memory_order_relaxed);
    at = 0;
    for (const ParamShard& p : *grads) {
      std::memcpy(p.grad->data<float>(), staging + at, size_t(p.grad->numel()) * sizeof(float));
      at += p.grad->numel();
    }
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

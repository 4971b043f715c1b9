// A deterministic toy CausalLM for testing the generation loop and samplers without weights:
// the logits of a token at position p are a fixed function of (token, p, vocab id), computed
// for this rank's vocab shard only, exactly as a real model leaves them.
#pragma once

#include <cmath>

#include "model/causal_lm.h"
#include "parallel/partition.h"

namespace tensorpar::testing {

class FakeCache : public KvCache {
 public:
  explicit FakeCache(int64_t cap) : cap_(cap) {}
  int64_t length() const override { return len_; }
  int64_t capacity() const override { return cap_; }
  void truncate(int64_t n) override { len_ = n; }
  int64_t bytes() const override { return 0; }
  void append(int64_t n) { len_ += n; }

 private:
  int64_t cap_, len_ = 0;
};

class FakeModel : public CausalLM {
 public:
  FakeModel(int64_t vocab, Communicator& tp) : tp_(tp) {
    config_.vocab_size = vocab;
    range_ = ::tensorpar::vocab_range(vocab, tp.size(), tp.rank());
  }
  // The full logits row (the oracle).
  static float logit(int32_t token, int64_t pos, int64_t v) {
    return float(3.0 * std::sin(0.37 * double(v) + 1.3 * double(token) + 0.11 * double(pos)));
  }
  const ModelConfig& config() const override { return config_; }
  Communicator& tp() override { return tp_; }
  Range vocab_range() const override { return range_; }
  std::unique_ptr<KvCache> make_cache(int64_t max_tokens) const override {
    return std::make_unique<FakeCache>(max_tokens);
  }
  void forward(Tensor& logits_local, std::span<const int32_t> tokens, KvCache& cache, bool last_only) override {
    const int64_t pos0 = cache.length(), T = int64_t(tokens.size());
    const int64_t first = last_only ? T - 1 : 0;
    float* out = logits_local.data<float>();
    for (int64_t t = first; t < T; ++t)
      for (int64_t v = range_.begin; v < range_.end; ++v)
        out[(t - first) * range_.size() + (v - range_.begin)] = logit(tokens[size_t(t)], pos0 + t, v);
    static_cast<FakeCache&>(cache).append(T);
  }
  float forward_backward(const Tensor&, const Tensor&, float) override { return 0; }
  float forward_loss(const Tensor&, const Tensor&) override { return 0; }
  void set_train_compute(const TrainCompute&) override {}
  std::vector<ParamShard> parameters() override { return {}; }
  void zero_grad() override {}
  int64_t weight_bytes() const override { return 0; }

 private:
  Communicator& tp_;
  ModelConfig config_;
  Range range_;
};

}  // namespace tensorpar::testing

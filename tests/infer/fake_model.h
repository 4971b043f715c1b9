// A deterministic toy CausalLM for testing the generation loop and samplers without weights:
// the logits of a token at position p are a fixed function of (token, p, vocab id), computed
// for this rank's vocab shard only, exactly as a real model leaves them.
#pragma once

#include <cmath>

#include "model/causal_lm.h"
#include "parallel/partition.h"

namespace tensorpar::testing {

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
  std::unique_ptr<KvPool> make_kv_pool(int64_t n_blocks, int64_t block_size) const override {
    return std::make_unique<KvPool>(0, n_blocks, block_size, 0, 1);
  }
  int64_t kv_bytes_per_token() const override { return 0; }
  void forward_batch(Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool&) override {
    float* out = logits_local.data<float>();
    int64_t r = 0;
    for (const SeqChunk& c : seqs) {
      const int64_t T = int64_t(c.tokens.size());
      const int64_t first = c.logits == LogitRows::kAll ? 0 : c.logits == LogitRows::kLast ? T - 1 : T;
      for (int64_t t = first; t < T; ++t, ++r)
        for (int64_t v = range_.begin; v < range_.end; ++v)
          out[r * range_.size() + (v - range_.begin)] = logit(c.tokens[size_t(t)], c.pos0 + t, v);
    }
  }
  float forward_backward(const Tensor&, const Tensor&, float) override { return 0; }
  float forward_loss(const Tensor&, const Tensor&) override { return 0; }
  void set_train_compute(const TrainCompute&) override {}
  int64_t activation_bytes() const override { return 0; }
  std::vector<ParamShard> parameters() override { return {}; }
  void zero_grad() override {}
  int64_t weight_bytes() const override { return 0; }

 private:
  Communicator& tp_;
  ModelConfig config_;
  Range range_;
};

}  // namespace tensorpar::testing

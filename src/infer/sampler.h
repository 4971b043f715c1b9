// Token sampling over logits Sharded by vocab, exact and without gathering the vocabulary:
// every filter (top-k, top-p, min-p) keeps the tokens whose scaled logit is at least a global
// threshold, found with a few small collectives; the draw is a walk over the kept mass with
// per-rank masses gathered, so the result equals sampling the full logits row in vocab order.
#pragma once

#include <cstdint>
#include <random>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "parallel/partition.h"

namespace tensorpar {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
};

// The thresholds and draw as a naive sampler computes them on one full row; the oracle for the
// sharded sampler and the definition of what it returns. `u` is the uniform draw in [0, 1).
int32_t sample_full_naive(const float* logits, int64_t V, const SamplingParams& p, double u);

class Sampler {
 public:
  explicit Sampler(const SamplingParams& params);
  const SamplingParams& params() const { return params_; }
  // logits_local (V_local) holds vocab columns `vocab` of the row. Collective over tp: every
  // rank calls it with the same params and the same history, and gets the same token.
  int32_t sample(const float* logits_local, Range vocab, Communicator& tp);
  // The next uniform draw in [0, 1) (the same sequence on every rank).
  double next_uniform();

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace tensorpar

// One sequence's sampling across its steps: its parameters, its stream of uniform draws (from
// its own seed) and the token history its penalties act on. `tensorpar generate` / `chat` and
// the serving engine both sample through it, so the same prompt, parameters and seed give the
// same tokens from either.
#pragma once

#include <cstdint>
#include <map>
#include <random>
#include <span>

#include "infer/batch_sampler.h"
#include "infer/sampler.h"

namespace tensorpar {

class SequenceSampler {
 public:
  // Validates `params` (sampler.h). The prompt's ids feed the repetition penalty.
  SequenceSampler(const SamplingParams& params, std::span<const int32_t> prompt);

  const SamplingParams& params() const { return params_; }
  // The next row to sample: draws the next uniform (sampled rows only) and lists the history
  // the penalties need. top_logprobs: -1 none, n >= 0 the chosen token's and the top n.
  RowSampling next_row(int top_logprobs = -1);
  // The token sampled for the last row joins the history.
  void accept(int32_t token);

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::map<int32_t, int32_t> counts_;  // token -> times generated (0: prompt only)
};

}  // namespace tensorpar

#include "infer/sequence_sampler.h"

namespace tensorpar {

SequenceSampler::SequenceSampler(const SamplingParams& params, std::span<const int32_t> prompt)
    : params_(params), rng_(params.seed) {
  validate(params_);
  // Only the repetition penalty looks at the prompt; the others count generated tokens.
  if (params_.repetition_penalty != 1.0f)
    for (int32_t id : prompt) counts_.try_emplace(id, 0);
}

RowSampling SequenceSampler::next_row(int top_logprobs) {
  RowSampling r;
  r.params = params_;
  // 53 random bits: uniform in [0, 1), the same on every rank that follows the same stream.
  if (params_.temperature > 0) r.u = double(rng_() >> 11) * 0x1.0p-53;
  if (params_.has_penalties()) r.counts.assign(counts_.begin(), counts_.end());
  r.top_logprobs = top_logprobs;
  return r;
}

void SequenceSampler::accept(int32_t token) {
  if (params_.has_penalties()) ++counts_[token];
}

}  // namespace tensorpar

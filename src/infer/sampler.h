// What a sequence asks of its sampling, and the definition of a draw: the naive sampler over
// one full logits row. The sharded sampler (batch_sampler.h) returns exactly what this returns
// on the full row after penalties; SequenceSampler (sequence_sampler.h) keeps a sequence's
// draws and history.
#pragma once

#include <cstdint>

namespace tensorpar {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy (argmax, lowest id on ties)
  int top_k = 0;             // 0: off
  float top_p = 1.0f;        // 1: off
  float min_p = 0.0f;        // 0: off
  uint64_t seed = 0;
  // Penalties, applied to the raw logits before temperature and the filters (as vLLM does):
  // first the repetition penalty over every token of the prompt and of the generated text
  // (Hugging Face / vLLM: logit > 0 ? logit / r : logit * r; 1: off), then OpenAI's
  // logit -= count * frequency_penalty + (count > 0 ? presence_penalty : 0) over the generated
  // tokens (count: times generated; 0: off).
  float repetition_penalty = 1.0f;
  float frequency_penalty = 0.0f;
  float presence_penalty = 0.0f;
  bool has_penalties() const {
    return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f;
  }
};

// Throws a one-line Error naming the first parameter out of range: temperature >= 0 and
// finite, top_k >= 0, top_p in (0, 1], min_p in [0, 1), repetition_penalty in (0, 10],
// frequency and presence penalties finite.
void validate(const SamplingParams& p);

// The thresholds and draw as a naive sampler computes them on one full row (penalties already
// applied); the oracle for the sharded sampler and the definition of what it returns. `u` is
// the uniform draw in [0, 1).
int32_t sample_full_naive(const float* logits, int64_t V, const SamplingParams& p, double u);

}  // namespace tensorpar

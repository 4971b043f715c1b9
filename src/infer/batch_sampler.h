// Sampling every row of an engine step at once over logits Sharded by vocab, with a number of
// collectives that does not grow with the rows: each phase gathers all rows' small per-rank
// pieces in one collective. Row by row the result is what sample_full_naive gives on the full
// row after penalties; no rank gathers the vocab.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "infer/sampler.h"
#include "parallel/partition.h"

namespace tensorpar {

// One row's sampling: its parameters, its draw and its history.
struct RowSampling {
  SamplingParams params;  // filters and penalties; seed unused here (u is the draw)
  double u = 0;           // uniform draw in [0, 1) from the request's own stream (unused if greedy)
  // The tokens the penalties act on, ids distinct: (id, times generated). An id of the prompt
  // that was not generated has count 0 (the repetition penalty acts on it, frequency and
  // presence do not). Empty when the params have no penalties.
  std::vector<std::pair<int32_t, int32_t>> counts;
  int top_logprobs = -1;  // -1: no logprobs; n >= 0: the chosen token's logprob and the top n
};

// A logit after the penalties of SamplingParams, for a token seen `count` times in the
// generated text (0: only in the prompt), evaluated in float in that order.
inline float penalised(float logit, int32_t count, const SamplingParams& p) {
  if (p.repetition_penalty != 1.0f)
    logit = logit > 0 ? logit / p.repetition_penalty : logit * p.repetition_penalty;
  return logit - (float(count) * p.frequency_penalty + (count > 0 ? p.presence_penalty : 0.0f));
}

struct RowSample {
  int32_t token = -1;
  float logprob =
      0;  // log-softmax of the raw logits (before penalties, temperature); 0 if not asked
  std::vector<std::pair<int32_t, float>>
      top;  // (token, logprob), most likely first, ties: lower id
};

// logits_local (R, V_local) f32, contiguous, holds vocab columns `vocab` of R rows; penalties
// are applied to it in place. Collective over tp: every rank passes the same rows and params and
// gets identical results. Collectives per call (all_gathers unless noted), whatever R is:
//   R = 0: none.
//   only greedy rows (with or without logprobs and penalties): 1.
//   any sampled row, none with top_p < 1: 3 (row statistics, kept masses, all_reduce of tokens).
//   any row with top_p < 1: 3 + B, where B >= 1 is the number of rounds the slowest row's
//   threshold bisection over float keys takes (at most 32: keys span under 2^32).
std::vector<RowSample> sample_batch(Tensor& logits_local, Range vocab,
                                    std::span<const RowSampling> rows, Communicator& tp);

}  // namespace tensorpar

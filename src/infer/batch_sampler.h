// Sampling every row of an engine step at once over logits Sharded by vocab, with a number of
// collectives that does not grow with the rows: each phase gathers all rows' small per-rank
// pieces in one collective. Row by row the result is what sample_full_naive gives on the full
// row after penalties (and what Sampler gives with the same draw u); no rank gathers the vocab.
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
  SamplingParams params;  // temperature (0 = greedy), top_k, top_p, min_p; seed unused here
  double u = 0;           // uniform draw in [0, 1) from the request's own stream (unused if greedy)
  // Penalties (OpenAI's definition, applied to the generated tokens as vLLM does), before
  // temperature: logit[j] -= count_j * frequency_penalty + (count_j > 0 ? presence_penalty : 0),
  // evaluated in float in that order.
  float frequency_penalty = 0, presence_penalty = 0;
  std::vector<std::pair<int32_t, int32_t>> counts;  // (token id, times generated), ids distinct
  int top_logprobs = -1;  // -1: no logprobs; n >= 0: the chosen token's logprob and the top n
};

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

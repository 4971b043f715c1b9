// Perplexity over a token stream with vocab-sharded logits: the stream is cut into windows of
// `ctx` tokens, each run from an empty cache, and every token after a window's first is scored
// with the vocab-parallel log-softmax (small all-reduces, no gather).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/causal_lm.h"

namespace tensorpar {

struct PerplexityResult {
  double nll_sum = 0;    // sum of -log p(token | prefix) over scored tokens
  int64_t scored = 0;    // tokens scored
  double ppl() const;    // exp(nll_sum / scored)
};

// `on_logits(first_position, logits_local (T, V_local))` sees every window's logits (e.g. to
// dump them); may be empty. Collective over model.tp().
PerplexityResult perplexity(CausalLM& model, std::span<const int32_t> tokens, int64_t ctx,
                            const std::function<void(int64_t, const Tensor&)>& on_logits);

// Gathers vocab-sharded logits_local (T, V_local) into (T, V) on every rank (for dumping).
Tensor gather_vocab_shards(const Tensor& logits_local, Range vocab, int64_t V, Communicator& tp);

}  // namespace tensorpar

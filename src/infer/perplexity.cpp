#include "infer/perplexity.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace tensorpar {

double PerplexityResult::ppl() const { return scored ? std::exp(nll_sum / double(scored)) : 0.0; }

PerplexityResult perplexity(CausalLM& model, std::span<const int32_t> tokens, int64_t ctx,
                            const std::function<void(int64_t, const Tensor&)>& on_logits) {
  TP_CHECK(ctx >= 2, "[perplexity] context ", ctx, " must be at least 2 tokens");
  TP_CHECK(tokens.size() >= 2, "[perplexity] need at least 2 tokens, got ", tokens.size());
  const int64_t V = model.config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i)
    TP_CHECK(tokens[i] >= 0 && tokens[i] < V, "[perplexity] token ", tokens[i], " at position ", i,
             " outside the vocabulary [0, ", V, ")");
  const Range vocab = model.vocab_range();
  PerplexityResult r;
  auto cache = model.make_cache(ctx);
  for (int64_t start = 0; start < int64_t(tokens.size()); start += ctx) {
    const int64_t T = std::min<int64_t>(ctx, int64_t(tokens.size()) - start);
    cache->truncate(0);
    Tensor logits = Tensor::empty({T, vocab.size()}, DType::kF32);
    model.forward(logits, tokens.subspan(size_t(start), size_t(T)), *cache, /*last_only=*/false);
    if (on_logits) on_logits(start, logits);
    if (T < 2) continue;
    // Row t predicts token start + t + 1.
    Tensor targets = Tensor::empty({T - 1}, DType::kI64);
    for (int64_t t = 0; t + 1 < T; ++t) targets.data<int64_t>()[t] = tokens[size_t(start + t + 1)];
    Tensor lse = Tensor::empty({T - 1}, DType::kF32);
    const float mean = vocab_parallel_cross_entropy_forward(nullptr, lse, logits.slice(0, 0, T - 1), targets,
                                                            vocab, V, model.tp());
    r.nll_sum += double(mean) * double(T - 1);
    r.scored += T - 1;
  }
  return r;
}

Tensor gather_vocab_shards(const Tensor& logits_local, Range vocab, int64_t V, Communicator& tp) {
  const int64_t T = logits_local.dim(0);
  // Shards may be uneven: all-gather padded blocks of the largest shard, then unpad.
  const int n = tp.size();
  std::vector<int64_t> ranges(size_t(2 * n));
  const int64_t mine[2] = {vocab.begin, vocab.end};
  tp.all_gather(mine, ranges.data(), 2, DType::kI64);
  int64_t width = 0;
  for (int r = 0; r < n; ++r) width = std::max(width, ranges[size_t(2 * r + 1)] - ranges[size_t(2 * r)]);
  Tensor block = Tensor::zeros({T, width}, DType::kF32);
  if (vocab.size() > 0) block.slice(1, 0, vocab.size()).copy_from(logits_local);
  Tensor all = Tensor::empty({int64_t(n), T, width}, DType::kF32);
  tp.all_gather(block.raw(), all.raw(), T * width, DType::kF32);
  Tensor full = Tensor::empty({T, V}, DType::kF32);
  for (int r = 0; r < n; ++r) {
    const int64_t b = ranges[size_t(2 * r)], e = ranges[size_t(2 * r + 1)];
    TP_CHECK(e <= V, "[gather_vocab_shards] rank ", r, " holds vocab columns up to ", e, " > V = ", V);
    if (e > b) full.slice(1, b, e).copy_from(all.slice(0, r, r + 1).reshape({T, width}).slice(1, 0, e - b));
  }
  return full;
}

}  // namespace tensorpar

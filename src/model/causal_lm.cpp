// KV storage (KvPool, the one-sequence KvCache) and CausalLM's one-sequence conveniences, which
// are a batch of one over the batched forward: generation, chat, perplexity and the server all
// run the same forward.
#include "model/causal_lm.h"

#include <algorithm>

#include "core/error.h"

namespace tensorpar {

KvPool::KvPool(int64_t n_layers, int64_t n_blocks, int64_t block_size, int64_t kv_local, int64_t head_dim,
               DType dtype)
    : n_blocks_(n_blocks), block_size_(block_size), dtype_(dtype) {
  TP_CHECK(n_blocks >= 1 && block_size >= 1, "[KvPool] got ", n_blocks, " blocks of ", block_size,
           " tokens, expected at least 1 of 1");
  TP_CHECK(dtype == DType::kF32 || dtype == DType::kF16, "[KvPool] keys and values are stored as f32 or f16, not ",
           dtype_name(dtype));
  for (int64_t l = 0; l < n_layers; ++l) {
    // At least one element so a rank without kv heads still has valid pointers.
    const int64_t n = std::max<int64_t>(1, n_blocks * block_size * kv_local * head_dim);
    k_.push_back(Tensor::zeros({n}, dtype));
    v_.push_back(Tensor::zeros({n}, dtype));
  }
}

int64_t KvPool::bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < k_.size(); ++i) n += k_[i].nbytes() + v_[i].nbytes();
  return n;
}

KvCache::KvCache(std::unique_ptr<KvPool> pool, int64_t capacity) : pool_(std::move(pool)), capacity_(capacity) {
  TP_CHECK(pool_ && pool_->n_blocks() * pool_->block_size() >= capacity, "[KvCache] the pool does not hold ",
           capacity, " tokens");
  for (int64_t b = 0; b < pool_->n_blocks(); ++b) blocks_.push_back(int32_t(b));
}

void KvCache::truncate(int64_t length) {
  TP_CHECK(length >= 0 && length <= length_, "[KvCache::truncate] length: got ", length, ", expected in [0, ",
           length_, "]");
  length_ = length;
}

std::unique_ptr<KvCache> CausalLM::make_cache(int64_t max_tokens) const {
  TP_CHECK(max_tokens >= 1, "[make_cache] max_tokens: got ", max_tokens, ", expected >= 1");
  TP_CHECK(config().family != ArchFamily::kGpt2 || max_tokens <= config().max_position, "[make_cache] max_tokens ",
           max_tokens, " exceeds the model's ", config().max_position, " learned positions");
  // Blocks of 64 tokens (fewer for a short cache): large enough that the block walk costs
  // nothing, small enough that the last block wastes little.
  const int64_t bs = std::min<int64_t>(64, max_tokens);
  return std::make_unique<KvCache>(make_kv_pool((max_tokens + bs - 1) / bs, bs), max_tokens);
}

void CausalLM::forward(Tensor& logits_local, std::span<const int32_t> tokens, KvCache& cache, bool last_only) {
  const int64_t T = int64_t(tokens.size()), pos0 = cache.length();
  TP_CHECK(T >= 1, "[CausalLM::forward] no tokens");
  TP_CHECK(pos0 + T <= cache.capacity(), "[CausalLM::forward] ", T, " tokens at position ", pos0,
           " overflow the cache of ", cache.capacity(), " tokens");
  SeqChunk c;
  c.tokens = tokens;
  c.pos0 = pos0;
  c.blocks = cache.blocks();
  c.logits = last_only ? LogitRows::kLast : LogitRows::kAll;
  forward_batch(logits_local, std::span<const SeqChunk>(&c, 1), cache.pool());
  cache.set_length(pos0 + T);
}

}  // namespace tensorpar

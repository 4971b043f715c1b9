// Block pool and prefix cache. Lookups walk the chain from the first block: each step hashes
// (the previous block's key, this block's tokens), then compares the tokens and the parent key
// of every registered block in that bucket, so a step costs O(block_size).
#include "serve/block_manager.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace tensorpar {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t chain_hash(uint64_t parent_key, std::span<const int32_t> tokens) {
  uint64_t h = mix(parent_key + 0x9e3779b97f4a7c15ull);
  for (int32_t t : tokens) h = mix(h ^ uint64_t(uint32_t(t)));
  return h;
}

}  // namespace

BlockManager::BlockManager(int64_t n_blocks, int64_t block_size, bool prefix_caching)
    : block_size_(block_size), prefix_caching_(prefix_caching) {
  TP_CHECK(n_blocks >= 0 && n_blocks <= std::numeric_limits<int32_t>::max(),
           "[BlockManager] n_blocks: got ", n_blocks, ", expected in [0, 2^31)");
  TP_CHECK(block_size >= 1, "[BlockManager] block_size: got ", block_size, ", expected >= 1");
  blocks_.resize(size_t(n_blocks));
  empty_.reserve(size_t(n_blocks));
  for (int64_t b = n_blocks - 1; b >= 0; --b) empty_.push_back(int32_t(b));  // block 0 first
}

void BlockManager::check_id(int32_t block, const char* where) const {
  TP_CHECK(block >= 0 && block < int32_t(blocks_.size()), "[BlockManager::", where, "] block: got ",
           block, ", expected in [0, ", blocks_.size(), ")");
}

int32_t BlockManager::ref_count(int32_t block) const {
  check_id(block, "ref_count");
  return blocks_[size_t(block)].refs;
}

bool BlockManager::is_cached(int32_t block) const {
  check_id(block, "is_cached");
  return blocks_[size_t(block)].registered;
}

int32_t BlockManager::find(uint64_t parent_key, std::span<const int32_t> tokens) const {
  const auto [first, last] = index_.equal_range(chain_hash(parent_key, tokens));
  for (auto it = first; it != last; ++it) {
    const Block& b = blocks_[size_t(it->second)];
    if (b.parent_key == parent_key &&
        std::equal(tokens.begin(), tokens.end(), b.tokens.begin(), b.tokens.end()))
      return it->second;
  }
  return -1;
}

std::vector<int32_t> BlockManager::match_prefix(std::span<const int32_t> tokens, int64_t limit) {
  TP_CHECK(limit >= 0 && limit <= int64_t(tokens.size()),
           "[BlockManager::match_prefix] limit: got ", limit, ", expected in [0, ", tokens.size(),
           "]");
  query_tokens_ += int64_t(tokens.size());
  std::vector<int32_t> out;
  if (!prefix_caching_) return out;
  uint64_t parent_key = 0;
  for (int64_t i = 0; (i + 1) * block_size_ <= limit; ++i) {
    const int32_t id =
        find(parent_key, tokens.subspan(size_t(i * block_size_), size_t(block_size_)));
    if (id < 0) break;
    Block& b = blocks_[size_t(id)];
    if (b.refs++ == 0) {  // was cached-evictable: now held
      lru_.erase(b.lru);
      ++used_;
    }
    out.push_back(id);
    parent_key = b.key;
  }
  hit_tokens_ += int64_t(out.size()) * block_size_;
  return out;
}

int32_t BlockManager::allocate() {
  int32_t id;
  if (!empty_.empty()) {
    id = empty_.back();
    empty_.pop_back();
  } else if (!lru_.empty()) {
    id = lru_.front();
    unregister(id, /*keep_root=*/true);
  } else {
    return -1;
  }
  blocks_[size_t(id)].refs = 1;
  ++used_;
  return id;
}

void BlockManager::unregister(int32_t root, bool keep_root) {
  // Detach the root from its parent's children; descendants go with the root.
  if (const int32_t p = blocks_[size_t(root)].parent; p >= 0) {
    auto& siblings = blocks_[size_t(p)].children;
    const auto it = std::find(siblings.begin(), siblings.end(), root);
    TP_ASSERT(it != siblings.end(), "block ", root, " missing from its parent ", p, "'s children");
    siblings.erase(it);
  }
  std::vector<int32_t> stack{root};
  while (!stack.empty()) {
    const int32_t id = stack.back();
    stack.pop_back();
    Block& b = blocks_[size_t(id)];
    TP_ASSERT(b.registered, "unregistering block ", id, ", which is not registered");
    const auto [first, last] = index_.equal_range(b.hash);
    for (auto it = first; it != last; ++it)
      if (it->second == id) {
        index_.erase(it);
        break;
      }
    stack.insert(stack.end(), b.children.begin(), b.children.end());
    b.children.clear();
    b.tokens.clear();
    b.registered = false;
    b.parent = -1;
    b.key = b.parent_key = b.hash = 0;
    if (b.refs == 0) {
      lru_.erase(b.lru);
      if (!(keep_root && id == root)) empty_.push_back(id);
    }
  }
}

void BlockManager::commit_full_block(int32_t block, std::span<const int32_t> prefix_tokens) {
  check_id(block, "commit_full_block");
  Block& b = blocks_[size_t(block)];
  TP_CHECK(b.refs > 0, "[BlockManager::commit_full_block] block ", block,
           ": got a free block, expected one the caller holds");
  const int64_t n = int64_t(prefix_tokens.size());
  TP_CHECK(n > 0 && n % block_size_ == 0, "[BlockManager::commit_full_block] prefix of ", n,
           " tokens: expected a positive multiple of the block size ", block_size_);
  TP_CHECK(!b.registered, "[BlockManager::commit_full_block] block ", block,
           ": got a block already in the prefix cache, expected a new one");
  if (!prefix_caching_) return;
  uint64_t parent_key = 0;
  int32_t parent = -1;
  const int64_t last = n / block_size_ - 1;
  for (int64_t i = 0; i < last; ++i) {
    parent = find(parent_key, prefix_tokens.subspan(size_t(i * block_size_), size_t(block_size_)));
    if (parent < 0) return;  // an earlier block is not cached: this one could never be found
    parent_key = blocks_[size_t(parent)].key;
  }
  const auto tokens = prefix_tokens.subspan(size_t(last * block_size_));
  if (find(parent_key, tokens) >= 0) return;  // cached already: this copy stays private
  b.registered = true;
  b.key = next_key_++;
  b.parent_key = parent_key;
  b.parent = parent;
  b.hash = chain_hash(parent_key, tokens);
  b.tokens.assign(tokens.begin(), tokens.end());
  index_.emplace(b.hash, block);
  if (parent >= 0) blocks_[size_t(parent)].children.push_back(block);
}

void BlockManager::release(int32_t block) {
  check_id(block, "release");
  Block& b = blocks_[size_t(block)];
  TP_CHECK(b.refs > 0, "[BlockManager::release] block ", block,
           ": got a free block, expected one with a reference to drop");
  if (--b.refs > 0) return;
  --used_;
  if (b.registered)
    b.lru = lru_.insert(lru_.end(), block);
  else
    empty_.push_back(block);
}

void BlockManager::add_ref(int32_t block) {
  check_id(block, "add_ref");
  Block& b = blocks_[size_t(block)];
  TP_CHECK(b.refs > 0, "[BlockManager::add_ref] block ", block,
           ": got a free block, expected a held one (cached blocks are taken by match_prefix)");
  ++b.refs;
}

}  // namespace tensorpar

// The paged KV cache's bookkeeping (no tensors): a pool of blocks of block_size tokens with
// reference counts, and a prefix cache that lets a sequence reuse the blocks of an earlier one
// with the same leading tokens. Every rank of a TP group keeps an identical copy, fed the same
// calls.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace tensorpar {

// A block is free (no reference), held (referenced by >= 1 sequence), and, independently,
// registered in the prefix cache or not. Free registered blocks are the cache proper: they keep
// their contents until evicted, least recently released first, when no never-used or private
// free block is left. A registered block is keyed by its chain: (the key of the block before it,
// its own tokens), with a key that is unique for its lifetime, and the tokens compared on every
// lookup, so equal keys mean equal whole prefixes and a hash collision can never alias.
class BlockManager {
 public:
  BlockManager(int64_t n_blocks, int64_t block_size, bool prefix_caching = true);

  int64_t block_size() const { return block_size_; }
  int64_t total_blocks() const { return int64_t(blocks_.size()); }
  // Blocks no sequence references (never used, released private, and cached-evictable).
  int64_t free_blocks() const { return total_blocks() - used_; }
  // Blocks referenced by at least one sequence.
  int64_t used_blocks() const { return used_; }
  // Blocks registered in the prefix cache, held or free.
  int64_t cached_blocks() const { return int64_t(index_.size()); }

  // The longest run of full blocks of tokens[0, limit) found in the prefix cache, in order from
  // the start, stopping at the first miss; takes a reference on each block returned. Pass
  // limit < tokens.size() to keep at least one token to compute. Counts tokens.size() query
  // tokens and the matched tokens as hits (call it once per admission).
  std::vector<int32_t> match_prefix(std::span<const int32_t> tokens, int64_t limit);
  // A block with no contents for a sequence (reference count 1): a never-used or released
  // private block if any, else the least recently released cached block, dropped from the cache
  // with every cached block chained after it (they could no longer be reached). -1 when every
  // block is referenced.
  int32_t allocate();
  // Marks `block` (held by the caller) as holding the full block that ends prefix_tokens (the
  // whole prefix [0, end), end a multiple of block_size) and registers it in the cache, unless an
  // identical block is cached already or the blocks before it are not (then it stays private).
  // O(prefix_tokens.size()): the chain is looked up from the start.
  void commit_full_block(int32_t block, std::span<const int32_t> prefix_tokens);
  // Drops one reference; a block left unreferenced becomes cached (if registered; most recently
  // released) or free. Release a sequence's blocks last to first, so that the tail of a prefix
  // is evicted before its head.
  void release(int32_t block);
  // Takes one more reference on a held block (a sequence sharing another's block).
  void add_ref(int32_t block);

  int32_t ref_count(int32_t block) const;
  bool is_cached(int32_t block) const;  // registered in the prefix cache

  // For a hit rate: tokens asked for by match_prefix, and tokens it found.
  int64_t prefix_query_tokens() const { return query_tokens_; }
  int64_t prefix_hit_tokens() const { return hit_tokens_; }

 private:
  struct Block {
    int32_t refs = 0;
    bool registered = false;
    uint64_t key = 0;                  // chain key while registered: unique, never reused
    uint64_t parent_key = 0;           // the key of the block before it (0: the first block)
    int32_t parent = -1;               // that block's id
    uint64_t hash = 0;                 // of (parent_key, tokens): the index_ bucket
    std::vector<int32_t> tokens;       // this block's tokens, compared on lookup
    std::vector<int32_t> children;     // registered blocks chained after this one
    std::list<int32_t>::iterator lru;  // valid while registered and unreferenced
  };

  void check_id(int32_t block, const char* where) const;
  // The registered block chained after `parent_key` with exactly `tokens`, or -1.
  int32_t find(uint64_t parent_key, std::span<const int32_t> tokens) const;
  // Unregisters `block` and every block chained after it; unreferenced ones become free
  // (except `block` itself when `keep_root`, which the caller takes).
  void unregister(int32_t block, bool keep_root);

  int64_t block_size_;
  bool prefix_caching_;
  std::vector<Block> blocks_;
  std::vector<int32_t> empty_;  // free and unregistered; allocated from the back
  std::list<int32_t> lru_;      // free and registered; front: least recently released
  std::unordered_multimap<uint64_t, int32_t> index_;  // hash -> registered block
  uint64_t next_key_ = 1;
  int64_t used_ = 0;
  int64_t query_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace tensorpar

// Shard ranges for any TP size: balanced uneven ranges instead of divisibility refusals.
// Every layer asks this file which slice of a dim, a set of heads, or the vocab a rank owns,
// so the rule lives in one place (Megatron keeps it in tensor_parallel/utils).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace tensorpar {

// Half-open [begin, end).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool empty() const { return end <= begin; }
  bool contains(int64_t i) const { return i >= begin && i < end; }
  bool operator==(const Range&) const = default;
};

std::string range_str(const Range& r);  // "[3, 7)"

// Part `index` of [0, n) cut into `parts` contiguous ranges whose sizes differ by at most one
// (the first n % parts parts are one larger). Any n >= 0 and parts >= 1 work.
Range partition_even(int64_t n, int parts, int index);
// All parts at once, in order.
std::vector<Range> partition_even_all(int64_t n, int parts);

// True when `ranges` are contiguous in order and cover exactly [0, n) (empty ranges allowed).
bool ranges_tile(std::span<const Range> ranges, int64_t n);

// Attention heads of one rank: whole KV groups together with their query heads.
struct HeadRange {
  Range q;   // query heads [begin, end) of n_heads
  Range kv;  // kv heads [begin, end) of n_kv_heads
  int64_t group_size = 1;  // query heads per kv head (n_heads / n_kv_heads)
  // kv head (global index) that global query head `q_head` reads.
  int64_t kv_of_q(int64_t q_head) const { return q_head / group_size; }
};

// The rule:
// - parts <= n_kv_heads: the kv groups are cut by partition_even(n_kv_heads, parts, index) and
//   each rank takes the query heads of its groups (GQA/MHA/MQA alike).
// - parts > n_kv_heads: kv heads are replicated. Rank r serves kv head k = r * n_kv_heads / parts
//   (floor), so each kv head gets a contiguous block of floor or ceil(parts / n_kv_heads) ranks;
//   the ranks of a block share that head's query heads by partition_even, and each holds a copy
//   of the kv head (kv = [k, k+1)).
// - parts > n_heads: some ranks get no query head; their q and kv ranges are empty (they hold
//   no attention weights and contribute zeros to the row-parallel o_proj).
// Needs n_heads % n_kv_heads == 0.
HeadRange partition_heads(int64_t n_heads, int64_t n_kv_heads, int parts, int index);

// Vocab rows of rank `index`: partition_even of `vocab` (pass a padded size to pad; see below).
Range vocab_range(int64_t vocab, int parts, int index);
// `vocab` rounded up to a multiple of `multiple` (>= 1), e.g. 64 like vLLM or 128 * tp like
// Megatron. Padded rows are never targets and never sampled; they exist only to even out shards.
int64_t padded_vocab_size(int64_t vocab, int64_t multiple);

}  // namespace tensorpar

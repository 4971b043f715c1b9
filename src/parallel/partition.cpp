// Balanced shard ranges (see partition.h for the rules).
#include "parallel/partition.h"

#include "core/error.h"

namespace tensorpar {

std::string range_str(const Range& r) {
  return detail::concat("[", r.begin, ", ", r.end, ")");
}

Range partition_even(int64_t n, int parts, int index) {
  TP_CHECK(n >= 0, "[partition_even] n: got ", n, ", expected >= 0");
  TP_CHECK(parts >= 1, "[partition_even] parts: got ", parts, ", expected >= 1");
  TP_CHECK(index >= 0 && index < parts, "[partition_even] index: got ", index, ", expected in [0, ",
           parts, ")");
  const int64_t base = n / parts, extra = n % parts;
  const int64_t begin = index * base + (index < extra ? index : extra);
  return Range{begin, begin + base + (index < extra ? 1 : 0)};
}

std::vector<Range> partition_even_all(int64_t n, int parts) {
  std::vector<Range> out;
  out.reserve(static_cast<size_t>(parts > 0 ? parts : 0));
  for (int i = 0; i < parts; ++i) out.push_back(partition_even(n, parts, i));
  if (parts < 1) partition_even(n, parts, 0);  // throws the usual message
  return out;
}

bool ranges_tile(std::span<const Range> ranges, int64_t n) {
  int64_t at = 0;
  for (const Range& r : ranges) {
    if (r.begin != at || r.end < r.begin) return false;
    at = r.end;
  }
  return at == n;
}

HeadRange partition_heads(int64_t n_heads, int64_t n_kv_heads, int parts, int index) {
  TP_CHECK(n_heads >= 1 && n_kv_heads >= 1 && n_heads % n_kv_heads == 0,
           "[partition_heads] heads: got n_heads=", n_heads, " n_kv_heads=", n_kv_heads,
           ", expected n_heads a positive multiple of n_kv_heads");
  TP_CHECK(parts >= 1, "[partition_heads] parts: got ", parts, ", expected >= 1");
  TP_CHECK(index >= 0 && index < parts, "[partition_heads] index: got ", index,
           ", expected in [0, ", parts, ")");
  HeadRange h;
  h.group_size = n_heads / n_kv_heads;
  if (parts <= n_kv_heads) {
    h.kv = partition_even(n_kv_heads, parts, index);
    h.q = Range{h.kv.begin * h.group_size, h.kv.end * h.group_size};
    return h;
  }
  // Replicated kv heads: the ranks serving kv head k are r with floor(r * n_kv / parts) == k,
  // i.e. r in [ceil(k * parts / n_kv), ceil((k + 1) * parts / n_kv)).
  const int64_t k = int64_t(index) * n_kv_heads / parts;
  const auto first_rank = [&](int64_t kv) { return (kv * parts + n_kv_heads - 1) / n_kv_heads; };
  const int64_t r0 = first_rank(k), r1 = first_rank(k + 1);
  const Range local = partition_even(h.group_size, int(r1 - r0), int(index - r0));
  h.q = Range{k * h.group_size + local.begin, k * h.group_size + local.end};
  h.kv = local.empty() ? Range{k, k} : Range{k, k + 1};
  return h;
}

Range vocab_range(int64_t vocab, int parts, int index) {
  TP_CHECK(vocab >= 1, "[vocab_range] vocab: got ", vocab, ", expected >= 1");
  return partition_even(vocab, parts, index);
}

int64_t padded_vocab_size(int64_t vocab, int64_t multiple) {
  TP_CHECK(vocab >= 1 && multiple >= 1, "[padded_vocab_size] got vocab=", vocab,
           " multiple=", multiple, ", expected both >= 1");
  return (vocab + multiple - 1) / multiple * multiple;
}

}  // namespace tensorpar

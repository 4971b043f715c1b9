#include "parallel/partition.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"

namespace tensorpar {
namespace {

TEST(Partition, EvenRangesTileAndBalance) {
  for (int64_t n : {0, 1, 7, 33, 577}) {
    for (int parts = 1; parts <= 9; ++parts) {
      const auto all = partition_even_all(n, parts);
      ASSERT_EQ(int(all.size()), parts);
      EXPECT_TRUE(ranges_tile(all, n));
      int64_t lo = n, hi = 0;
      for (const Range& r : all) {
        lo = std::min(lo, r.size());
        hi = std::max(hi, r.size());
      }
      EXPECT_LE(hi - lo, 1) << "n " << n << " parts " << parts;
      // Larger parts come first.
      for (int i = 1; i < parts; ++i) EXPECT_GE(all[size_t(i - 1)].size(), all[size_t(i)].size());
    }
  }
  EXPECT_EQ(partition_even(7, 3, 0), (Range{0, 3}));
  EXPECT_EQ(partition_even(7, 3, 1), (Range{3, 5}));
  EXPECT_EQ(partition_even(7, 3, 2), (Range{5, 7}));
  EXPECT_EQ(partition_even(2, 4, 3), (Range{2, 2}));  // more parts than items: empty tail
}

TEST(Partition, BadArgumentsThrow) {
  EXPECT_THROW(partition_even(-1, 2, 0), Error);
  EXPECT_THROW(partition_even(4, 0, 0), Error);
  EXPECT_THROW(partition_even(4, 2, 2), Error);
  EXPECT_THROW(partition_even(4, 2, -1), Error);
  EXPECT_THROW(partition_heads(9, 2, 2, 0), Error);  // 9 heads do not group into 2 kv heads
  EXPECT_THROW(partition_heads(9, 3, 0, 0), Error);
  EXPECT_THROW(vocab_range(0, 2, 0), Error);
  EXPECT_THROW(padded_vocab_size(10, 0), Error);
}

TEST(Partition, RangesTile) {
  const std::vector<Range> ok = {{0, 2}, {2, 2}, {2, 5}};
  EXPECT_TRUE(ranges_tile(ok, 5));
  EXPECT_FALSE(ranges_tile(ok, 6));
  const std::vector<Range> gap = {{0, 2}, {3, 5}};
  EXPECT_FALSE(ranges_tile(gap, 5));
}

// Checks the invariants of partition_heads for every rank and returns the q-head counts.
std::vector<int64_t> check_heads(int64_t n_heads, int64_t n_kv, int parts) {
  std::vector<int64_t> q_counts;
  const int64_t g = n_heads / n_kv;
  std::vector<int> q_owner(size_t(n_heads), 0);
  std::vector<int> kv_holders(size_t(n_kv), 0);
  for (int r = 0; r < parts; ++r) {
    const HeadRange h = partition_heads(n_heads, n_kv, parts, r);
    EXPECT_EQ(h.group_size, g);
    q_counts.push_back(h.q.size());
    for (int64_t q = h.q.begin; q < h.q.end; ++q) {
      ++q_owner[size_t(q)];
      EXPECT_TRUE(h.kv.contains(h.kv_of_q(q))) << "rank " << r << " q " << q;
    }
    for (int64_t k = h.kv.begin; k < h.kv.end; ++k) ++kv_holders[size_t(k)];
    if (parts > n_kv) {
      EXPECT_LE(h.kv.size(), 1);
    }
    if (h.q.empty()) {
      EXPECT_TRUE(h.kv.empty());
    }
    // Every kv head a rank holds is read by one of its q heads.
    for (int64_t k = h.kv.begin; k < h.kv.end; ++k)
      EXPECT_TRUE(h.q.begin < (k + 1) * g && h.q.end > k * g) << "rank " << r << " kv " << k;
  }
  for (int64_t q = 0; q < n_heads; ++q) EXPECT_EQ(q_owner[size_t(q)], 1) << "q head " << q;
  for (int64_t k = 0; k < n_kv; ++k) {
    EXPECT_GE(kv_holders[size_t(k)], 1) << "kv head " << k;
    if (parts <= n_kv) {
      EXPECT_EQ(kv_holders[size_t(k)], 1);
    }
  }
  return q_counts;
}

TEST(Partition, HeadsSmolLM2) {
  // SmolLM2-135M: 9 query heads, 3 kv heads (groups of 3).
  EXPECT_EQ(check_heads(9, 3, 1), (std::vector<int64_t>{9}));
  // tp 2: one rank 2 kv groups (6 q heads), the other 1 (3 q heads).
  EXPECT_EQ(check_heads(9, 3, 2), (std::vector<int64_t>{6, 3}));
  const HeadRange r0 = partition_heads(9, 3, 2, 0), r1 = partition_heads(9, 3, 2, 1);
  EXPECT_EQ(r0.kv, (Range{0, 2}));
  EXPECT_EQ(r0.q, (Range{0, 6}));
  EXPECT_EQ(r1.kv, (Range{2, 3}));
  EXPECT_EQ(r1.q, (Range{6, 9}));
  EXPECT_EQ(check_heads(9, 3, 3), (std::vector<int64_t>{3, 3, 3}));
  // tp 4 > 3 kv heads: kv head r*3/4 = 0, 0, 1, 2; kv head 0's three q heads split 2 + 1.
  EXPECT_EQ(check_heads(9, 3, 4), (std::vector<int64_t>{2, 1, 3, 3}));
  EXPECT_EQ(partition_heads(9, 3, 4, 1).kv, (Range{0, 1}));
  EXPECT_EQ(partition_heads(9, 3, 4, 1).q, (Range{2, 3}));
  EXPECT_EQ(partition_heads(9, 3, 4, 2).kv, (Range{1, 2}));
  // tp 5: kv heads 0, 0, 1, 1, 2.
  EXPECT_EQ(check_heads(9, 3, 5), (std::vector<int64_t>{2, 1, 2, 1, 3}));
  // tp 9: one q head each, with its own copy of its kv head.
  EXPECT_EQ(check_heads(9, 3, 9), std::vector<int64_t>(9, 1));
  for (int r = 0; r < 9; ++r) EXPECT_EQ(partition_heads(9, 3, 9, r).kv, (Range{r / 3, r / 3 + 1}));
  // tp 10 > heads: one rank gets nothing.
  const auto c10 = check_heads(9, 3, 10);
  EXPECT_EQ(std::count(c10.begin(), c10.end(), 0), 1);
}

TEST(Partition, HeadsManyShapes) {
  // MHA, GQA, MQA at many sizes: tiling, balance of kv groups, kv replication.
  const std::pair<int64_t, int64_t> shapes[] = {{8, 8}, {32, 8}, {14, 2}, {12, 1}, {52, 4}, {9, 3}};
  for (const auto& [nh, nkv] : shapes)
    for (int parts = 1; parts <= 12; ++parts) {
      SCOPED_TRACE(::testing::Message() << nh << " heads " << nkv << " kv, parts " << parts);
      const auto counts = check_heads(nh, nkv, parts);
      if (parts <= nkv) {  // kv groups balanced: q counts differ by at most one group
        const auto [lo, hi] = std::minmax_element(counts.begin(), counts.end());
        EXPECT_LE(*hi - *lo, nh / nkv);
      }
    }
}

TEST(Partition, Vocab) {
  EXPECT_EQ(vocab_range(49152, 2, 1), (Range{24576, 49152}));
  EXPECT_EQ(vocab_range(13, 4, 0), (Range{0, 4}));
  EXPECT_EQ(vocab_range(13, 4, 3), (Range{10, 13}));
  EXPECT_EQ(padded_vocab_size(50257, 64), 50304);
  EXPECT_EQ(padded_vocab_size(64, 64), 64);
  EXPECT_EQ(range_str(Range{3, 7}), "[3, 7)");
}

}  // namespace
}  // namespace tensorpar

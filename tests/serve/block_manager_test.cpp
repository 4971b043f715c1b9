// The KV block manager: allocation, reference counts, prefix matching by whole chains, LRU
// eviction of cached blocks, hit counters, caller errors; and random serving-like traffic checked
// step by step against a naive model that keys cached blocks by their whole token prefix.
#include "serve/block_manager.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <vector>

#include "core/error.h"
#include "test_util.h"

namespace tensorpar {
namespace {

std::vector<int32_t> iota_tokens(int32_t first, int64_t n) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  std::iota(t.begin(), t.end(), first);
  return t;
}

// Allocates and commits the full blocks of `tokens` as one sequence would; returns its blocks.
std::vector<int32_t> prefill(BlockManager& m, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> blocks;
  const int64_t bs = m.block_size();
  for (int64_t end = bs; end <= int64_t(tokens.size()); end += bs) {
    const int32_t b = m.allocate();
    EXPECT_GE(b, 0);
    if (b < 0) break;
    m.commit_full_block(b, std::span(tokens).first(size_t(end)));
    blocks.push_back(b);
  }
  return blocks;
}

void release_all(BlockManager& m, const std::vector<int32_t>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) m.release(*it);
}

TEST(BlockManager, AllocatesUntilExhaustedAndReleaseReturnsBlocks) {
  BlockManager m(4, 16);
  EXPECT_EQ(m.total_blocks(), 4);
  EXPECT_EQ(m.block_size(), 16);
  std::vector<int32_t> got;
  for (int i = 0; i < 4; ++i) got.push_back(m.allocate());
  std::vector<int32_t> sorted = got;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_EQ(m.allocate(), -1);
  EXPECT_EQ(m.free_blocks(), 0);
  EXPECT_EQ(m.used_blocks(), 4);
  m.release(got[2]);
  EXPECT_EQ(m.free_blocks(), 1);
  EXPECT_EQ(m.used_blocks(), 3);
  EXPECT_EQ(m.allocate(), got[2]);
  EXPECT_EQ(m.allocate(), -1);
}

TEST(BlockManager, ACommittedPrefixIsSharedByTheSameTokensOnly) {
  BlockManager m(16, 4);
  const auto a = iota_tokens(100, 10);  // two full blocks and 2 tokens
  const auto seq1 = prefill(m, a);
  ASSERT_EQ(seq1.size(), 2u);
  EXPECT_TRUE(m.is_cached(seq1[0]) && m.is_cached(seq1[1]));
  // The same prompt: both blocks, each now held twice.
  const auto hit = m.match_prefix(a, int64_t(a.size()) - 1);
  EXPECT_EQ(hit, seq1);
  EXPECT_EQ(m.ref_count(seq1[0]), 2);
  EXPECT_EQ(m.ref_count(seq1[1]), 2);
  EXPECT_EQ(m.used_blocks(), 2);
  // A prompt that differs in its first block matches nothing.
  auto b = a;
  b[1] = 7;
  EXPECT_TRUE(m.match_prefix(b, int64_t(b.size())).empty());
  // One that differs in its second block matches the first only.
  auto c = a;
  c[5] = 7;
  EXPECT_EQ(m.match_prefix(c, int64_t(c.size())), std::vector<int32_t>{seq1[0]});
  EXPECT_EQ(m.ref_count(seq1[0]), 3);
  m.release(seq1[0]);
  // A different first block followed by the same second-block tokens: its own chain, even when
  // that first block is cached too.
  auto d = a;
  d[0] = 5;
  const auto seq_d = prefill(m, d);
  ASSERT_EQ(seq_d.size(), 2u);
  EXPECT_TRUE(m.is_cached(seq_d[1]));  // not a duplicate of seq1[1]: another parent
  const auto hit_d = m.match_prefix(d, int64_t(d.size()));
  EXPECT_EQ(hit_d, seq_d);
  EXPECT_NE(hit_d[1], seq1[1]);
}

TEST(BlockManager, LimitIsRespected) {
  BlockManager m(8, 4);
  const auto t = iota_tokens(0, 8);
  const auto seq = prefill(m, t);
  EXPECT_EQ(m.match_prefix(t, 8).size(), 2u);
  EXPECT_EQ(m.match_prefix(t, 7).size(), 1u);  // keeps the last token to compute
  EXPECT_EQ(m.match_prefix(t, 4).size(), 1u);
  EXPECT_EQ(m.match_prefix(t, 3).size(), 0u);
  EXPECT_EQ(m.match_prefix(t, 0).size(), 0u);
}

TEST(BlockManager, ADuplicateBlockStaysPrivate) {
  // Two sequences compute the same prompt at once: the second copy is not registered and goes
  // back to the free blocks when released; the first stays the one that is matched.
  BlockManager m(4, 2);
  const auto t = iota_tokens(0, 2);
  const int32_t b1 = m.allocate(), b2 = m.allocate();
  m.commit_full_block(b1, t);
  m.commit_full_block(b2, t);
  EXPECT_TRUE(m.is_cached(b1));
  EXPECT_FALSE(m.is_cached(b2));
  EXPECT_EQ(m.cached_blocks(), 1);
  m.release(b2);
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_EQ(m.match_prefix(t, 2), std::vector<int32_t>{b1});
}

TEST(BlockManager, NeverUsedBlocksAreTakenBeforeCachedOnes) {
  BlockManager m(3, 2);
  const auto t = iota_tokens(0, 2);
  const auto seq = prefill(m, t);
  release_all(m, seq);
  EXPECT_EQ(m.free_blocks(), 3);
  EXPECT_EQ(m.cached_blocks(), 1);
  const int32_t x = m.allocate(), y = m.allocate();
  EXPECT_NE(x, seq[0]);
  EXPECT_NE(y, seq[0]);
  EXPECT_TRUE(m.is_cached(seq[0]));
  // Only the cached block is left: it is evicted and no longer matched.
  EXPECT_EQ(m.allocate(), seq[0]);
  EXPECT_FALSE(m.is_cached(seq[0]));
  EXPECT_EQ(m.cached_blocks(), 0);
  m.release(seq[0]);
  EXPECT_TRUE(m.match_prefix(t, 2).empty());
}

TEST(BlockManager, CachedBlocksAreEvictedLeastRecentlyReleasedFirst) {
  BlockManager m(3, 1);
  const std::vector<int32_t> ta{1}, tb{2}, tc{3};
  const int32_t a = prefill(m, ta)[0], b = prefill(m, tb)[0], c = prefill(m, tc)[0];
  m.release(b);
  m.release(a);
  m.release(c);
  // Matching a takes it off the LRU list; released again, it becomes the most recent.
  EXPECT_EQ(m.match_prefix(ta, 1), std::vector<int32_t>{a});
  m.release(a);
  EXPECT_EQ(m.allocate(), b);
  EXPECT_TRUE(m.match_prefix(tb, 1).empty());
  EXPECT_EQ(m.allocate(), c);
  EXPECT_TRUE(m.match_prefix(tc, 1).empty());
  EXPECT_EQ(m.match_prefix(ta, 1), std::vector<int32_t>{a});  // still cached, now held
  EXPECT_EQ(m.allocate(), -1);                                // held blocks are never evicted
}

TEST(BlockManager, HeldBlocksAreNeverEvicted) {
  BlockManager m(2, 2);
  const auto t1 = iota_tokens(0, 2), t2 = iota_tokens(10, 2);
  const auto held = prefill(m, t1);  // stays referenced
  const auto done = prefill(m, t2);
  release_all(m, done);
  EXPECT_EQ(m.allocate(), done[0]);
  EXPECT_EQ(m.allocate(), -1);
  EXPECT_TRUE(m.is_cached(held[0]));
  EXPECT_EQ(m.match_prefix(t1, 2), held);
}

TEST(BlockManager, EvictingABlockDropsTheBlocksChainedAfterIt) {
  // Released last to first, the head of a prefix is the last to go; evicting it anyway (the
  // tail is held) also unregisters the tail, which no lookup could reach any more.
  BlockManager m(3, 2);
  const auto t = iota_tokens(0, 4);
  const auto seq = prefill(m, t);
  m.release(seq[0]);                   // head free and cached, tail still held
  const int32_t fresh = m.allocate();  // the one never-used block first
  EXPECT_NE(fresh, seq[0]);
  EXPECT_NE(fresh, seq[1]);
  EXPECT_EQ(m.allocate(), seq[0]);  // then the head is evicted
  EXPECT_FALSE(m.is_cached(seq[1]));
  EXPECT_EQ(m.cached_blocks(), 0);
  m.release(seq[1]);  // unregistered now: free, not cached
  EXPECT_EQ(m.free_blocks(), 1);
  EXPECT_EQ(m.allocate(), seq[1]);
}

TEST(BlockManager, CountsQueryAndHitTokens) {
  BlockManager m(8, 4);
  const auto t = iota_tokens(0, 10);
  prefill(m, t);
  EXPECT_EQ(m.prefix_query_tokens(), 0);
  m.match_prefix(t, 9);  // 2 blocks
  m.match_prefix(iota_tokens(50, 6), 5);
  EXPECT_EQ(m.prefix_query_tokens(), 16);
  EXPECT_EQ(m.prefix_hit_tokens(), 8);
}

TEST(BlockManager, WithoutPrefixCachingNothingIsShared) {
  BlockManager m(4, 2, /*prefix_caching=*/false);
  const auto t = iota_tokens(0, 4);
  const auto seq = prefill(m, t);
  EXPECT_FALSE(m.is_cached(seq[0]));
  EXPECT_TRUE(m.match_prefix(t, 4).empty());
  EXPECT_EQ(m.prefix_query_tokens(), 4);
  EXPECT_EQ(m.prefix_hit_tokens(), 0);
  release_all(m, seq);
  EXPECT_EQ(m.free_blocks(), 4);
  EXPECT_EQ(m.cached_blocks(), 0);
}

TEST(BlockManager, RejectsInvalidCalls) {
  EXPECT_THROW(BlockManager(-1, 4), Error);
  EXPECT_THROW(BlockManager(4, 0), Error);
  BlockManager m(4, 4);
  const auto t = iota_tokens(0, 8);
  EXPECT_THROW(m.release(0), Error);  // free
  EXPECT_THROW(m.add_ref(0), Error);
  EXPECT_THROW(m.release(4), Error);  // out of range
  EXPECT_THROW(m.release(-1), Error);
  EXPECT_THROW(m.ref_count(7), Error);
  const int32_t b = m.allocate();
  EXPECT_THROW(m.commit_full_block(b, std::span(t).first(3)), Error);  // not a full block
  EXPECT_THROW(m.commit_full_block(b, std::span(t).first(0)), Error);
  EXPECT_THROW(m.commit_full_block(5, std::span(t).first(4)), Error);
  EXPECT_THROW(m.commit_full_block(b + 1, std::span(t).first(4)), Error);  // not held
  m.commit_full_block(b, std::span(t).first(4));
  EXPECT_THROW(m.commit_full_block(b, std::span(t).first(4)), Error);  // registered already
  EXPECT_THROW(m.match_prefix(t, 9), Error);
  EXPECT_THROW(m.match_prefix(t, -1), Error);
  m.add_ref(b);
  m.release(b);
  m.release(b);
  EXPECT_THROW(m.release(b), Error);  // one release too many
}

// The naive model: cached blocks keyed by their whole prefix; a block is matchable when it and
// every block before it in its prefix are registered. It checks each manager decision.
class NaiveModel {
 public:
  NaiveModel(int64_t n, int64_t bs)
      : bs_(bs), refs_(size_t(n), 0), prefix_(size_t(n)), released_(size_t(n), 0) {}

  int32_t registered(const std::vector<int32_t>& prefix) const {
    for (size_t b = 0; b < prefix_.size(); ++b)
      if (prefix_[b] == prefix) return int32_t(b);
    return -1;
  }
  std::vector<int32_t> match(const std::vector<int32_t>& tokens, int64_t limit) {
    std::vector<int32_t> out;
    for (int64_t end = bs_; end <= limit; end += bs_) {
      const int32_t b = registered(std::vector<int32_t>(tokens.begin(), tokens.begin() + end));
      if (b < 0) break;
      ++refs_[size_t(b)];
      out.push_back(b);
    }
    return out;
  }
  // Checks the manager's choice `got` and applies it.
  void allocate(int32_t got) {
    bool any_empty = false;
    int32_t lru = -1;
    for (size_t b = 0; b < refs_.size(); ++b) {
      if (refs_[b] > 0) continue;
      if (!prefix_[b])
        any_empty = true;
      else if (lru < 0 || released_[b] < released_[size_t(lru)])
        lru = int32_t(b);
    }
    if (any_empty) {
      ASSERT_GE(got, 0);
      ASSERT_EQ(refs_[size_t(got)], 0);
      ASSERT_FALSE(prefix_[size_t(got)].has_value())
          << "evicted block " << got << " with never-used blocks left";
    } else if (lru >= 0) {
      ASSERT_EQ(got, lru) << "not the least recently released";
      const std::vector<int32_t> dropped = *prefix_[size_t(lru)];
      for (auto& p : prefix_)  // it and everything chained after it
        if (p && p->size() >= dropped.size() &&
            std::equal(dropped.begin(), dropped.end(), p->begin()))
          p.reset();
    } else {
      ASSERT_EQ(got, -1);
      return;
    }
    refs_[size_t(got)] = 1;
  }
  void commit(int32_t b, const std::vector<int32_t>& prefix) {
    for (int64_t end = bs_; end < int64_t(prefix.size()); end += bs_)
      if (registered(std::vector<int32_t>(prefix.begin(), prefix.begin() + end)) < 0) return;
    if (registered(prefix) >= 0) return;
    prefix_[size_t(b)] = prefix;
  }
  void release(int32_t b) {
    if (--refs_[size_t(b)] == 0) released_[size_t(b)] = ++clock_;
  }
  int64_t used() const {
    return std::count_if(refs_.begin(), refs_.end(), [](int r) { return r > 0; });
  }
  bool cached(int32_t b) const { return prefix_[size_t(b)].has_value(); }
  int refs(int32_t b) const { return refs_[size_t(b)]; }

 private:
  int64_t bs_;
  std::vector<int> refs_;
  std::vector<std::optional<std::vector<int32_t>>> prefix_;
  std::vector<int64_t> released_;
  int64_t clock_ = 0;
};

TEST(BlockManager, RandomTrafficMatchesTheNaiveModel) {
  TP_SEED_TRACE();
  testing::Rng rng(7);
  for (int round = 0; round < 20; ++round) {
    const int64_t n = rng.integer(3, 12), bs = rng.integer(1, 4);
    BlockManager m(n, bs);
    NaiveModel ref(n, bs);
    // A few prompts sharing beginnings, from a 3-token alphabet so chains collide often.
    std::vector<std::vector<int32_t>> prompts(4);
    for (auto& p : prompts) {
      p = prompts[0];
      p.resize(size_t(rng.integer(0, int64_t(p.size()) + 1)));
      for (int64_t k = rng.integer(1, 4 * bs + 2); k > 0; --k)
        p.push_back(int32_t(rng.integer(0, 3)));
    }
    struct Seq {
      std::vector<int32_t> tokens, blocks;
    };
    std::vector<Seq> running;
    auto check = [&] {
      ASSERT_EQ(m.used_blocks(), ref.used());
      for (int32_t b = 0; b < int32_t(n); ++b) {
        ASSERT_EQ(m.ref_count(b), ref.refs(b)) << "block " << b;
        ASSERT_EQ(m.is_cached(b), ref.cached(b)) << "block " << b;
      }
    };
    auto alloc = [&]() {
      const int32_t b = m.allocate();
      ref.allocate(b);
      return b;
    };
    for (int step = 0; step < 300; ++step) {
      const int64_t op = rng.integer(0, 10);
      if (op < 3) {  // admit: match the cached prefix, allocate and commit the rest
        Seq s;
        s.tokens = prompts[size_t(rng.integer(0, 4))];
        const int64_t limit = int64_t(s.tokens.size()) - 1;
        s.blocks = m.match_prefix(s.tokens, limit);
        ASSERT_EQ(s.blocks, ref.match(s.tokens, limit));
        bool ok = true;
        for (int64_t end = int64_t(s.blocks.size() + 1) * bs;
             ok && end - bs < int64_t(s.tokens.size()); end += bs) {
          const int32_t b = alloc();
          if (b < 0) {
            ok = false;
            break;
          }
          s.blocks.push_back(b);
          if (end <= int64_t(s.tokens.size())) {
            const std::vector<int32_t> prefix(s.tokens.begin(), s.tokens.begin() + end);
            m.commit_full_block(b, prefix);
            ref.commit(b, prefix);
          }
        }
        if (ok) {
          running.push_back(std::move(s));
        } else {  // not admitted: give everything back
          for (auto it = s.blocks.rbegin(); it != s.blocks.rend(); ++it)
            m.release(*it), ref.release(*it);
        }
      } else if (op < 8 && !running.empty()) {  // decode one token
        Seq& s = running[size_t(rng.integer(0, int64_t(running.size())))];
        if (int64_t(s.tokens.size()) == int64_t(s.blocks.size()) * bs) {
          const int32_t b = alloc();
          if (b < 0) continue;
          s.blocks.push_back(b);
        }
        s.tokens.push_back(int32_t(rng.integer(0, 3)));
        if (int64_t(s.tokens.size()) % bs == 0) {
          m.commit_full_block(s.blocks.back(), s.tokens);
          ref.commit(s.blocks.back(), s.tokens);
        }
      } else if (!running.empty()) {  // finish: release last to first
        const size_t i = size_t(rng.integer(0, int64_t(running.size())));
        for (auto it = running[i].blocks.rbegin(); it != running[i].blocks.rend(); ++it)
          m.release(*it), ref.release(*it);
        running.erase(running.begin() + int64_t(i));
      }
      check();
      if (::testing::Test::HasFatalFailure()) return;
    }
  }
}

}  // namespace
}  // namespace tensorpar

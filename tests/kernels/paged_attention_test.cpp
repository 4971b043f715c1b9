// Paged attention against the naive reference (contiguous keys, attention_forward_naive), over
// shuffled block tables; and batch invariance: a sequence's rows are bitwise the same alone, in a
// batch with other sequences, when its prompt is run in chunks instead of whole, and when the
// team splits a decode step's few items.
//
// Tolerance vs the reference (double sums there, f32 here): with
// inputs in [-1, 1] and a few hundred keys the difference stays under 1e-5 absolute.
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/paged_attention.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::Rng;

constexpr int64_t NH = 6, NKV = 2, HS = 16, BS = 4;  // the generic paths (block size not a multiple of 16)

struct Batch {
  std::vector<std::vector<int32_t>> tables;
  std::vector<PagedSeq> seqs;
  int64_t rows = 0;
};

// Sequences (pos0, T) with block tables drawn from a shuffled pool of n_blocks.
Batch make_batch(const std::vector<std::pair<int64_t, int64_t>>& spec, std::vector<int32_t>& free_blocks) {
  Batch b;
  for (auto [pos0, T] : spec) {
    std::vector<int32_t> t;
    for (int64_t i = 0; i < (pos0 + T + BS - 1) / BS; ++i) {
      t.push_back(free_blocks.back());
      free_blocks.pop_back();
    }
    b.tables.push_back(std::move(t));
  }
  for (size_t i = 0; i < spec.size(); ++i) {
    PagedSeq s;
    s.row_begin = b.rows, s.T = spec[i].second, s.pos0 = spec[i].first;
    s.blocks = b.tables[i].data(), s.n_blocks = int64_t(b.tables[i].size());
    b.seqs.push_back(s);
    b.rows += s.T;
  }
  return b;
}

PagedAttentionDims dims(int64_t window = 0) {
  PagedAttentionDims d;
  d.NH = NH, d.NKV = NKV, d.HS = HS, d.block_size = BS, d.window = window;
  return d;
}

TEST(PagedAttention, MatchesNaive) {
  Rng rng(11);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int64_t n_blocks = 64;
  std::vector<float> k = rng.uniform_vec(size_t(n_blocks * BS * NKV * HS)), v = rng.uniform_vec(k.size());
  std::vector<int32_t> pool(n_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  Batch b = make_batch({{0, 9}, {13, 1}, {5, 3}, {30, 1}, {0, 1}}, pool);
  std::vector<float> q = rng.uniform_vec(size_t(b.rows * NH * HS));
  std::vector<float> got(q.size(), NAN), want(q.size(), NAN);
  // Sliding windows (Gemma's local layers): shorter than, equal to and longer than the rows.
  for (int64_t window : {0, 1, 4, 9, 100}) {
    paged_attention_forward(got.data(), q.data(), k.data(), v.data(), b.seqs, dims(window));
    paged_attention_forward_naive(want.data(), q.data(), k.data(), v.data(), b.seqs, dims(window));
    EXPECT_LE(testing::max_abs_diff(got, want), 1e-5) << "window " << window;
  }
}

// The server's shapes: 16- and 32-token blocks (the 16-lane transposed score path), head sizes
// 64 (whole 64-wide value accumulators) and 80 (a 16-wide tail), 150+ keys; 3, 4, 5 and 9 query
// heads per kv head (tiles of four heads, whole and with every remainder).
TEST(PagedAttention, MatchesNaiveAtServingShapes) {
  Rng rng(13);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (auto [NH, NKV] : std::vector<std::pair<int64_t, int64_t>>{{6, 2}, {8, 2}, {10, 2}, {9, 1}})
  for (int64_t bs : {16, 32})
    for (int64_t hs : {64, 80})
    for (int64_t window : {0, 37, 16}) {
      SCOPED_TRACE("heads " + std::to_string(NH) + "/" + std::to_string(NKV) + " block " + std::to_string(bs) +
                   " HS " + std::to_string(hs) + " window " + std::to_string(window));
      const int64_t n_blocks = 40;
      std::vector<float> k = rng.uniform_vec(size_t(n_blocks * bs * NKV * hs)), v = rng.uniform_vec(k.size());
      std::vector<int32_t> pool(n_blocks);
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng.gen());
      std::vector<std::vector<int32_t>> tables;
      std::vector<PagedSeq> seqs;
      int64_t rows = 0;
      for (auto [pos0, T] : std::vector<std::pair<int64_t, int64_t>>{{150, 1}, {0, 37}, {64, 3}, {200, 1}}) {
        tables.emplace_back();
        for (int64_t i = 0; i < (pos0 + T + bs - 1) / bs; ++i) {
          tables.back().push_back(pool.back());
          pool.pop_back();
        }
      }
      size_t i = 0;
      for (auto [pos0, T] : std::vector<std::pair<int64_t, int64_t>>{{150, 1}, {0, 37}, {64, 3}, {200, 1}}) {
        PagedSeq s;
        s.row_begin = rows, s.T = T, s.pos0 = pos0, s.blocks = tables[i].data(), s.n_blocks = int64_t(tables[i].size());
        seqs.push_back(s);
        rows += T;
        ++i;
      }
      PagedAttentionDims d;
      d.NH = NH, d.NKV = NKV, d.HS = hs, d.block_size = bs, d.window = window;
      std::vector<float> q = rng.uniform_vec(size_t(rows * NH * hs));
      std::vector<float> got(q.size(), NAN), want(q.size(), NAN), alone(q.size(), NAN);
      paged_attention_forward(got.data(), q.data(), k.data(), v.data(), seqs, d);
      paged_attention_forward_naive(want.data(), q.data(), k.data(), v.data(), seqs, d);
      EXPECT_LE(testing::max_abs_diff(got, want), 1e-5);
      // Each sequence alone gives its rows bitwise.
      for (const PagedSeq& s : seqs) {
        PagedSeq one = s;
        paged_attention_forward(alone.data(), q.data(), k.data(), v.data(), std::span<const PagedSeq>(&one, 1), d);
        const size_t b = size_t(s.row_begin * NH * hs), e = size_t((s.row_begin + s.T) * NH * hs);
        EXPECT_EQ(0, std::memcmp(alone.data() + b, got.data() + b, (e - b) * sizeof(float))) << "rows at " << s.row_begin;
      }
    }
}

// f16 pools (half the memory): bitwise the f32 kernel on the same values widened and the query
// rounded to f16, and within 1e-5 of the naive reference on those values; across block sizes
// (the generic path at 4, lanes at 16 and 32), head groups, windows and positions.
TEST(PagedAttention, F16PoolIsTheF32KernelOnTheRoundedValues) {
  Rng rng(17);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (auto [nh, nkv] : std::vector<std::pair<int64_t, int64_t>>{{6, 2}, {4, 1}, {9, 3}})
  for (int64_t bs : {4, 16, 32})
    for (int64_t hs : {16, 64})
    for (int64_t window : {0, 5, 37}) {
      SCOPED_TRACE("heads " + std::to_string(nh) + "/" + std::to_string(nkv) + " block " + std::to_string(bs) +
                   " HS " + std::to_string(hs) + " window " + std::to_string(window));
      const std::vector<std::pair<int64_t, int64_t>> spec = {{70, 1}, {0, 21}, {33, 3}, {5, 1}};
      int64_t n_blocks = 0;
      for (auto [pos0, T] : spec) n_blocks += (pos0 + T + bs - 1) / bs;
      std::vector<int32_t> pool(static_cast<size_t>(n_blocks));
      std::iota(pool.begin(), pool.end(), 0);
      std::shuffle(pool.begin(), pool.end(), rng.gen());
      // Each sequence's blocks dealt in order from the shuffled pool.
      std::vector<std::vector<int32_t>> tables;
      size_t next = 0;
      for (auto [pos0, T] : spec) {
        tables.emplace_back();
        for (int64_t i = 0; i < (pos0 + T + bs - 1) / bs; ++i) tables.back().push_back(pool[next++]);
      }
      std::vector<PagedSeq> seqs;
      int64_t rows = 0;
      for (size_t i = 0; i < spec.size(); ++i) {
        PagedSeq s;
        s.row_begin = rows, s.T = spec[i].second, s.pos0 = spec[i].first;
        s.blocks = tables[i].data(), s.n_blocks = int64_t(tables[i].size());
        seqs.push_back(s);
        rows += s.T;
      }
      PagedAttentionDims d;
      d.NH = nh, d.NKV = nkv, d.HS = hs, d.block_size = bs, d.window = window;
      const size_t pool_elems = size_t(n_blocks * bs * nkv * hs);
      const std::vector<float> kf = rng.uniform_vec(pool_elems), vf = rng.uniform_vec(pool_elems);
      std::vector<f16> kh(pool_elems), vh(pool_elems);
      std::vector<float> kw(pool_elems), vw(pool_elems);
      for (size_t i = 0; i < pool_elems; ++i) {
        kh[i] = f32_to_f16(kf[i]), vh[i] = f32_to_f16(vf[i]);
        kw[i] = f16_to_f32(kh[i]), vw[i] = f16_to_f32(vh[i]);
      }
      const std::vector<float> q = rng.uniform_vec(size_t(rows * nh * hs));
      std::vector<float> qr(q.size());
      for (size_t i = 0; i < q.size(); ++i) qr[i] = f16_to_f32(f32_to_f16(q[i]));
      std::vector<float> got(q.size(), NAN), want(q.size(), NAN), naive(q.size(), NAN);
      paged_attention_forward_f16(got.data(), q.data(), kh.data(), vh.data(), seqs, d);
      paged_attention_forward(want.data(), qr.data(), kw.data(), vw.data(), seqs, d);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * sizeof(float)));
      paged_attention_forward_f16_naive(naive.data(), q.data(), kh.data(), vh.data(), seqs, d);
      EXPECT_LE(testing::max_abs_diff(got, naive), 1e-5);
    }
}

TEST(PagedAttention, BatchAndChunkInvariant) {
  for (int64_t window : {0, 6}) {
  SCOPED_TRACE("window " + std::to_string(window));
  Rng rng(12);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int64_t n_blocks = 64, T = 23;
  std::vector<float> k = rng.uniform_vec(size_t(n_blocks * BS * NKV * HS)), v = rng.uniform_vec(k.size());
  std::vector<int32_t> pool(n_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), rng.gen());
  // The sequence of interest, T rows from position 0, alone.
  Batch alone = make_batch({{0, T}}, pool);
  std::vector<float> q = rng.uniform_vec(size_t(T * NH * HS));
  std::vector<float> ref(q.size(), NAN);
  paged_attention_forward(ref.data(), q.data(), k.data(), v.data(), alone.seqs, dims(window));
  const int64_t row = NH * HS;
  // Its rows in chunks [0, 5), [5, 6), [6, 23), each batched after another sequence's rows.
  for (auto [c0, c1] : std::vector<std::pair<int64_t, int64_t>>{{0, 5}, {5, 6}, {6, T}}) {
    std::vector<int32_t> other_pool = pool;
    Batch b = make_batch({{7, 3}}, other_pool);
    PagedSeq s = alone.seqs[0];
    s.row_begin = b.rows, s.pos0 = c0, s.T = c1 - c0;
    b.seqs.push_back(s);
    std::vector<float> qb = rng.uniform_vec(size_t((b.rows + s.T) * row));
    std::copy(q.begin() + c0 * row, q.begin() + c1 * row, qb.begin() + b.rows * row);
    std::vector<float> out(qb.size(), NAN);
    paged_attention_forward(out.data(), qb.data(), k.data(), v.data(), b.seqs, dims(window));
    EXPECT_EQ(0, std::memcmp(out.data() + b.rows * row, ref.data() + c0 * row, size_t(s.T * row) * sizeof(float)))
        << "rows [" << c0 << ", " << c1 << ")";
  }
  }
}

// A prompt's rows are taken in groups that share each block of keys; every row is still bitwise
// what it is alone (a decode step at its position), in the f32 and the f16 kernel: prompts of 37
// and 70 rows (groups of 8 and a remainder), starting at 0 and mid-sequence, 5 heads per kv head
// (one tile of five) and 9 (five and four), windows shorter and longer than a group.
TEST(PagedAttention, PromptRowsAsWhenRunAlone) {
  Rng rng(19);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (auto [nh, nkv] : std::vector<std::pair<int64_t, int64_t>>{{10, 2}, {9, 1}})
    for (auto [pos0, T] : std::vector<std::pair<int64_t, int64_t>>{{0, 37}, {45, 70}})
      for (int64_t window : {0, 5, 100}) {
        SCOPED_TRACE("heads " + std::to_string(nh) + "/" + std::to_string(nkv) + " rows " + std::to_string(T) +
                     " from " + std::to_string(pos0) + " window " + std::to_string(window));
        const int64_t bs = 16, hs = 80, n_blocks = (pos0 + T + bs - 1) / bs;
        std::vector<int32_t> table(static_cast<size_t>(n_blocks));
        std::iota(table.begin(), table.end(), 0);
        std::shuffle(table.begin(), table.end(), rng.gen());
        PagedAttentionDims d;
        d.NH = nh, d.NKV = nkv, d.HS = hs, d.block_size = bs, d.window = window;
        const size_t pool_elems = size_t(n_blocks * bs * nkv * hs), row = size_t(nh * hs);
        const std::vector<float> k = rng.uniform_vec(pool_elems), v = rng.uniform_vec(pool_elems);
        std::vector<f16> kh(pool_elems), vh(pool_elems);
        for (size_t i = 0; i < pool_elems; ++i) kh[i] = f32_to_f16(k[i]), vh[i] = f32_to_f16(v[i]);
        const std::vector<float> q = rng.uniform_vec(size_t(T) * row);
        PagedSeq whole;
        whole.T = T, whole.pos0 = pos0, whole.blocks = table.data(), whole.n_blocks = n_blocks;
        std::vector<float> got(q.size(), NAN), got16(q.size(), NAN), alone(row), alone16(row), want(q.size(), NAN);
        paged_attention_forward(got.data(), q.data(), k.data(), v.data(), std::span<const PagedSeq>(&whole, 1), d);
        paged_attention_forward_f16(got16.data(), q.data(), kh.data(), vh.data(), std::span<const PagedSeq>(&whole, 1), d);
        paged_attention_forward_naive(want.data(), q.data(), k.data(), v.data(), std::span<const PagedSeq>(&whole, 1), d);
        EXPECT_LE(testing::max_abs_diff(got, want), 1e-5);
        for (int64_t t = 0; t < T; ++t) {
          PagedSeq one = whole;
          one.T = 1, one.pos0 = pos0 + t;
          const float* qt = q.data() + size_t(t) * row;
          paged_attention_forward(alone.data(), qt, k.data(), v.data(), std::span<const PagedSeq>(&one, 1), d);
          paged_attention_forward_f16(alone16.data(), qt, kh.data(), vh.data(), std::span<const PagedSeq>(&one, 1), d);
          EXPECT_EQ(0, std::memcmp(alone.data(), got.data() + size_t(t) * row, row * sizeof(float))) << "row " << t;
          EXPECT_EQ(0, std::memcmp(alone16.data(), got16.data() + size_t(t) * row, row * sizeof(float))) << "f16 row " << t;
        }
      }
}

// A decode step with fewer (row, kv head) items than twice the team is split by the whole team
// (scores by key blocks, softmax by head, values by columns): bitwise what one thread computes
// item by item, for 1-3 kv heads, 32- and 16-column splits (head size 64 and 80), with and
// without a window, on 2 and 3 threads; and within the naive reference's tolerance. The same for
// an f16 pool, which the team reads in place (each vector widened as it is loaded).
TEST(PagedAttention, DecodeRowSplitByTheTeamAsItemByItem) {
  Rng rng(23);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int saved = omp_get_max_threads();
  for (int64_t nkv : {1, 2, 3})
    for (int64_t hs : {64, 80})
      for (int64_t window : {0, 50})
        for (int64_t pos : {70, 300}) {
          SCOPED_TRACE("kv heads " + std::to_string(nkv) + " head size " + std::to_string(hs) + " window " +
                       std::to_string(window) + " position " + std::to_string(pos));
          const int64_t nh = 3 * nkv, bs = 16, n_blocks = (pos + 1 + bs - 1) / bs;
          std::vector<int32_t> table(static_cast<size_t>(n_blocks));
          std::iota(table.begin(), table.end(), 0);
          std::shuffle(table.begin(), table.end(), rng.gen());
          PagedAttentionDims d;
          d.NH = nh, d.NKV = nkv, d.HS = hs, d.block_size = bs, d.window = window;
          const std::vector<float> k = rng.uniform_vec(size_t(n_blocks * bs * nkv * hs)), v = rng.uniform_vec(k.size());
          const std::vector<float> q = rng.uniform_vec(size_t(nh * hs));
          PagedSeq one;
          one.T = 1, one.pos0 = pos, one.blocks = table.data(), one.n_blocks = n_blocks;
          const std::span<const PagedSeq> seqs(&one, 1);
          std::vector<float> alone(q.size(), NAN), want(q.size(), NAN);
          omp_set_num_threads(1);
          paged_attention_forward(alone.data(), q.data(), k.data(), v.data(), seqs, d);
          paged_attention_forward_naive(want.data(), q.data(), k.data(), v.data(), seqs, d);
          EXPECT_LE(testing::max_abs_diff(alone, want), 1e-5);
          // The f16 pool: read in place by the team, widened by each item alone.
          std::vector<f16> kh(k.size()), vh(v.size());
          for (size_t i = 0; i < k.size(); ++i) kh[i] = f32_to_f16(k[i]), vh[i] = f32_to_f16(v[i]);
          std::vector<float> alone16(q.size(), NAN), want16(q.size(), NAN);
          paged_attention_forward_f16(alone16.data(), q.data(), kh.data(), vh.data(), seqs, d);
          paged_attention_forward_f16_naive(want16.data(), q.data(), kh.data(), vh.data(), seqs, d);
          EXPECT_LE(testing::max_abs_diff(alone16, want16), 1e-5);
          for (int threads : {2, 3}) {
            omp_set_num_threads(threads);
            std::vector<float> got(q.size(), NAN), got16(q.size(), NAN);
            paged_attention_forward(got.data(), q.data(), k.data(), v.data(), seqs, d);
            EXPECT_EQ(0, std::memcmp(got.data(), alone.data(), got.size() * sizeof(float))) << threads << " threads";
            paged_attention_forward_f16(got16.data(), q.data(), kh.data(), vh.data(), seqs, d);
            EXPECT_EQ(0, std::memcmp(got16.data(), alone16.data(), got16.size() * sizeof(float)))
                << threads << " threads, f16 pool";
          }
        }
  omp_set_num_threads(saved);
}

TEST(PagedAttention, RejectsShortBlockTable) {
  std::vector<float> k(size_t(BS * NKV * HS)), v(k.size()), q(size_t(5 * NH * HS)), out(q.size());
  const int32_t table[1] = {0};
  PagedSeq s;
  s.T = 5, s.blocks = table, s.n_blocks = 1;  // 5 tokens need 2 blocks of 4
  EXPECT_THROW(paged_attention_forward(out.data(), q.data(), k.data(), v.data(), std::span<const PagedSeq>(&s, 1), dims()),
               Error);
}

}  // namespace
}  // namespace tensorpar

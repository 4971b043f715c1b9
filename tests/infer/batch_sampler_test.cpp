// The batched sharded sampler against the naive sampler on each full row (penalties applied
// naively, logprobs by a double-precision log-softmax), at tp 1, 2, 3 with vocab sizes that do
// not divide; and its collective count, which must not grow with the rows.
#include "infer/batch_sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "comm/launch.h"
#include "infer/sampler.h"
#include "parallel/partition.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::Rng;

// Forwards every op to `inner` and counts the calls: the test's view of how many collectives
// sample_batch makes.
class CountingCommunicator : public Communicator {
 public:
  explicit CountingCommunicator(Communicator& inner) : inner_(inner) {}
  int64_t calls() const { return calls_; }
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override {
    ++calls_;
    inner_.all_reduce(in, out, count, dtype, op);
  }
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override {
    ++calls_;
    inner_.all_gather(in, out, count, dtype);
  }
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override {
    ++calls_;
    inner_.reduce_scatter(in, out, count, dtype, op);
  }
  void broadcast(void* data, int64_t count, DType dtype, int root) override {
    ++calls_;
    inner_.broadcast(data, count, dtype, root);
  }
  void all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                  std::span<const int64_t> recv_counts, DType dtype) override {
    ++calls_;
    inner_.all_to_all(in, send_counts, out, recv_counts, dtype);
  }
  void send(const void* data, int64_t count, DType dtype, int peer) override {
    ++calls_;
    inner_.send(data, count, dtype, peer);
  }
  void recv(void* data, int64_t count, DType dtype, int peer) override {
    ++calls_;
    inner_.recv(data, count, dtype, peer);
  }
  void barrier() override {
    ++calls_;
    inner_.barrier();
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    ++calls_;
    return inner_.split(color, key);
  }

 private:
  Communicator& inner_;
  int64_t calls_ = 0;
};

struct BatchRun {
  std::vector<std::vector<RowSample>> results;  // [rank][row]
  std::vector<int64_t> collectives;             // [rank]
};

// Runs sample_batch at tp = n over the full rows (R x V), each rank passing its vocab columns.
BatchRun run_batch(const std::vector<std::vector<float>>& logits, int64_t V,
                   const std::vector<RowSampling>& rows, int n) {
  BatchRun run;
  run.results.resize(size_t(n));
  run.collectives.resize(size_t(n));
  const int64_t R = int64_t(rows.size());
  launch_ranks({.backend = Backend::kThreads,
                .n_ranks = n,
                .threads_per_rank = 1,
                .comm = CommOptions::from_env()},
               [&](Communicator& world) {
                 CountingCommunicator tp(world);
                 const Range vr = vocab_range(V, tp.size(), tp.rank());
                 Tensor local = Tensor::empty({R, vr.size()}, DType::kF32);
                 float* d = local.data<float>();
                 for (int64_t r = 0; r < R; ++r)
                   for (int64_t i = 0; i < vr.size(); ++i)
                     d[r * vr.size() + i] = logits[size_t(r)][size_t(vr.begin + i)];
                 run.results[size_t(tp.rank())] = sample_batch(local, vr, rows, tp);
                 run.collectives[size_t(tp.rank())] = tp.calls();
               });
  return run;
}

// The naive result for one row: logprobs from a double log-softmax of the raw row, then the
// penalties exactly as documented, then sample_full_naive.
RowSample naive_row(std::vector<float> x, const RowSampling& s) {
  RowSample want;
  const int64_t V = int64_t(x.size());
  double mx = -INFINITY;
  for (float v : x) mx = std::max(mx, double(v));
  double z = 0;
  for (float v : x) z += std::exp(double(v) - mx);
  const double lse = mx + std::log(z);
  std::vector<double> lp(x.size());
  for (size_t i = 0; i < x.size(); ++i) lp[i] = double(x[i]) - lse;
  if (s.top_logprobs >= 0) {
    std::vector<int32_t> order(x.size());
    for (size_t i = 0; i < x.size(); ++i) order[i] = int32_t(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return x[size_t(a)] > x[size_t(b)]; });
    for (int j = 0; j < s.top_logprobs && j < int(V); ++j)
      want.top.emplace_back(order[size_t(j)], float(lp[size_t(order[size_t(j)])]));
  }
  const SamplingParams& p = s.params;
  for (const auto& [id, c] : s.counts) {
    float& v = x[size_t(id)];
    if (p.repetition_penalty != 1.0f) v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    v -= float(c) * p.frequency_penalty + (c > 0 ? p.presence_penalty : 0.0f);
  }
  want.token = sample_full_naive(x.data(), V, s.params, s.u);
  if (s.top_logprobs >= 0) want.logprob = float(lp[size_t(want.token)]);
  return want;
}

void expect_matches_naive(const BatchRun& run, const std::vector<std::vector<float>>& logits,
                          const std::vector<RowSampling>& rows, const std::string& what) {
  const int n = int(run.results.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    SCOPED_TRACE(what + " row " + std::to_string(r));
    const RowSample want = naive_row(logits[r], rows[r]);
    const RowSample& got = run.results[0][r];
    ASSERT_EQ(got.token, want.token);
    if (rows[r].top_logprobs >= 0) {
      EXPECT_NEAR(got.logprob, want.logprob, 1e-5);
      ASSERT_EQ(got.top.size(), want.top.size());
      for (size_t j = 0; j < want.top.size(); ++j) {
        EXPECT_EQ(got.top[j].first, want.top[j].first) << "top " << j;
        EXPECT_NEAR(got.top[j].second, want.top[j].second, 1e-5) << "top " << j;
      }
    } else {
      EXPECT_TRUE(got.top.empty());
    }
    for (int k = 1; k < n; ++k) {  // every rank bitwise alike
      const RowSample& other = run.results[size_t(k)][r];
      EXPECT_EQ(other.token, got.token) << "rank " << k;
      EXPECT_EQ(std::bit_cast<uint32_t>(other.logprob), std::bit_cast<uint32_t>(got.logprob))
          << "rank " << k;
      EXPECT_EQ(other.top, got.top) << "rank " << k;
    }
  }
}

// A row of one of several kinds, with random draws, penalties and logprobs.
RowSampling random_row(Rng& rng, int64_t V, int kind) {
  RowSampling s;
  switch (kind % 7) {
    case 0:
      break;  // greedy
    case 1:
      s.params = {.temperature = 0.8f};
      break;
    case 2:
      s.params = {.temperature = 1.0f, .top_k = int(rng.integer(1, 12))};
      break;
    case 3:
      s.params = {.temperature = 1.2f, .top_p = 0.85f};
      break;
    case 4:
      s.params = {.temperature = 0.9f, .min_p = 0.08f};
      break;
    case 5:
      s.params = {.temperature = 1.0f, .top_k = 30, .top_p = 0.9f, .min_p = 0.02f};
      break;
    case 6:
      s.params = {.temperature = 1.0f, .top_k = int(V) + 5};
      break;  // k beyond the vocab
  }
  s.u = double(rng.integer(0, 1 << 30)) / double(1 << 30);
  if (rng.integer(0, 2) == 1) {
    s.params.frequency_penalty = rng.uniform(-0.5f, 1.5f);
    s.params.presence_penalty = rng.uniform(-0.5f, 1.5f);
    if (rng.integer(0, 2) == 1) s.params.repetition_penalty = rng.uniform(0.5f, 2.0f);
    const int64_t c = rng.integer(1, std::min<int64_t>(V, 12));
    std::vector<int32_t> ids(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) ids[size_t(i)] = int32_t(i);
    std::shuffle(ids.begin(), ids.end(), rng.gen());
    for (int64_t i = 0; i < c; ++i)
      s.counts.emplace_back(ids[size_t(i)], int32_t(rng.integer(0, 4)));
  }
  const int64_t lp = rng.integer(-1, 6);
  s.top_logprobs = int(lp < 0 ? -1 : lp);
  return s;
}

std::vector<std::vector<float>> random_logits(Rng& rng, int64_t R, int64_t V) {
  std::vector<std::vector<float>> l(static_cast<size_t>(R));
  for (auto& row : l) row = rng.uniform_vec(size_t(V), -4, 4);
  return l;
}

TEST(BatchSampler, MatchesTheNaiveSamplerRowByRow) {
  TP_SEED_TRACE();
  Rng rng(1);
  for (int64_t V : {37, 1000})
    for (int n : {1, 2, 3})
      for (int64_t R = 1; R <= 9; ++R) {
        const auto logits = random_logits(rng, R, V);
        std::vector<RowSampling> rows;
        for (int64_t r = 0; r < R; ++r) rows.push_back(random_row(rng, V, int(rng.integer(0, 7))));
        const BatchRun run = run_batch(logits, V, rows, n);
        expect_matches_naive(
            run, logits, rows,
            "V " + std::to_string(V) + " tp " + std::to_string(n) + " R " + std::to_string(R));
        for (int k = 1; k < n; ++k) EXPECT_EQ(run.collectives[size_t(k)], run.collectives[0]);
      }
}

TEST(BatchSampler, EveryKindAtEveryTpSize) {
  TP_SEED_TRACE();
  Rng rng(2);
  const int64_t V = 1000;
  for (int kind = 0; kind < 7; ++kind)
    for (int n : {1, 2, 3}) {
      const auto logits = random_logits(rng, 6, V);
      std::vector<RowSampling> rows;
      for (int r = 0; r < 6; ++r) rows.push_back(random_row(rng, V, kind));
      expect_matches_naive(run_batch(logits, V, rows, n), logits, rows,
                           "kind " + std::to_string(kind) + " tp " + std::to_string(n));
    }
}

TEST(BatchSampler, GreedyTiesGoToTheLowestIdAcrossRanks) {
  // V = 37: at tp 2 the ranks hold [0, 19) and [19, 37); at tp 3 [0, 13), [13, 25), [25, 37).
  const int64_t V = 37;
  std::vector<std::vector<float>> logits(4, std::vector<float>(size_t(V), 0.0f));
  logits[0][18] = logits[0][19] = 5;                  // straddles the tp 2 boundary
  logits[1][30] = logits[1][12] = logits[1][13] = 5;  // straddles tp 3's first boundary
  logits[2][36] = 7;                                  // last id of the last rank
  logits[2][0] = 6.5f;
  // Penalties create the tie: 25 (raw 6) drops to 5, tying 24.
  logits[3][24] = 5;
  logits[3][25] = 6;
  std::vector<RowSampling> rows(4);
  rows[1].top_logprobs = 3;  // ties in the alternatives too: 12, 13, 30
  rows[3].params.frequency_penalty = 0.5f;
  rows[3].params.presence_penalty = 0.5f;
  rows[3].counts = {{25, 1}};
  for (int n : {1, 2, 3}) {
    const BatchRun run = run_batch(logits, V, rows, n);
    for (int k = 0; k < n; ++k) {
      EXPECT_EQ(run.results[size_t(k)][0].token, 18) << "tp " << n;
      EXPECT_EQ(run.results[size_t(k)][1].token, 12) << "tp " << n;
      EXPECT_EQ(run.results[size_t(k)][2].token, 36) << "tp " << n;
      EXPECT_EQ(run.results[size_t(k)][3].token, 24) << "tp " << n;
      const auto& top = run.results[size_t(k)][1].top;
      ASSERT_EQ(top.size(), 3u);
      EXPECT_EQ(top[0].first, 12);
      EXPECT_EQ(top[1].first, 13);
      EXPECT_EQ(top[2].first, 30);
      EXPECT_EQ(top[0].second, top[2].second);
    }
    expect_matches_naive(run, logits, rows, "ties tp " + std::to_string(n));
  }
}

TEST(BatchSampler, LogprobsAreOfTheRawLogitsBeforePenaltiesAndTemperature) {
  TP_SEED_TRACE();
  Rng rng(4);
  const int64_t V = 101;
  auto logits = random_logits(rng, 2, V);
  logits[0][7] = 9;  // dominant; a large penalty moves the draw elsewhere
  logits[1][60] = 9;
  std::vector<RowSampling> rows(2);
  rows[0].counts = {{7, 3}};
  rows[0].params.frequency_penalty = 4;
  rows[0].top_logprobs = 2;
  rows[1].params = {.temperature = 2.0f, .top_k = 3};
  rows[1].counts = {{60, 2}};
  rows[1].params.presence_penalty = 20;
  rows[1].top_logprobs = 2;
  rows[1].u = 0.5;
  for (int n : {1, 2, 3}) {
    const BatchRun run = run_batch(logits, V, rows, n);
    expect_matches_naive(run, logits, rows, "tp " + std::to_string(n));
    for (int r = 0; r < 2; ++r) {
      const RowSample& got = run.results[0][size_t(r)];
      EXPECT_NE(got.token, r == 0 ? 7 : 60);
      EXPECT_EQ(got.top[0].first, r == 0 ? 7 : 60);  // still the most likely by the raw logits
    }
  }
}

TEST(BatchSampler, RepetitionPenaltyCoversThePromptFrequencyAndPresenceOnlyGenerated) {
  // Greedy rows over V = 50 with logits 0 except: 7 -> 3 (positive), 11 -> 2.5, 13 -> -1.
  const int64_t V = 50;
  std::vector<std::vector<float>> logits(4, std::vector<float>(size_t(V), 0.0f));
  for (auto& row : logits) row[7] = 3, row[11] = 2.5f, row[13] = -1;
  std::vector<RowSampling> rows(4);
  // Row 0: 7 seen in the prompt only (count 0); repetition 1.5 makes it 2 < 2.5: 11 wins.
  rows[0].params.repetition_penalty = 1.5f;
  rows[0].counts = {{7, 0}};
  // Row 1: the same prompt-only 7 with frequency and presence penalties alone: they do not act.
  rows[1].params.frequency_penalty = 2, rows[1].params.presence_penalty = 2;
  rows[1].counts = {{7, 0}};
  // Row 2: a negative logit is multiplied (more negative); the top stays 7.
  rows[2].params.repetition_penalty = 2;
  rows[2].counts = {{13, 1}};
  rows[2].top_logprobs = 0;
  // Row 3: a penalty below 1 favours seen tokens: 11 becomes 2.5 / 0.5 = 5 > 3.
  rows[3].params.repetition_penalty = 0.5f;
  rows[3].counts = {{11, 2}};
  for (int n : {1, 2, 3}) {
    const BatchRun run = run_batch(logits, V, rows, n);
    expect_matches_naive(run, logits, rows, "tp " + std::to_string(n));
    EXPECT_EQ(run.results[0][0].token, 11);
    EXPECT_EQ(run.results[0][1].token, 7);
    EXPECT_EQ(run.results[0][2].token, 7);
    EXPECT_EQ(run.results[0][3].token, 11);
  }
}

TEST(BatchSampler, TopPKeepsOnlyTheTopTokenWhenItHoldsEnoughMass) {
  // Token 20 holds 90% of the mass: top-p 0.5 keeps it alone, so even u = 0.99 (which lands on a
  // later token unfiltered: 20 ends at cumulative 0.956) draws it; the row without top-p does not.
  const int64_t V = 37;
  std::vector<std::vector<float>> logits(2, std::vector<float>(size_t(V), 0.0f));
  logits[0][20] = logits[1][20] = std::log(0.9f * 36 / 0.1f);
  std::vector<RowSampling> rows(2);
  rows[0].params = {.temperature = 1.0f, .top_p = 0.5f};
  rows[1].params = {.temperature = 1.0f};
  rows[0].u = rows[1].u = 0.99;
  for (int n : {1, 2, 3}) {
    const BatchRun run = run_batch(logits, V, rows, n);
    EXPECT_EQ(run.results[0][0].token, 20) << "tp " << n;
    EXPECT_NE(run.results[0][1].token, 20) << "tp " << n;
    expect_matches_naive(run, logits, rows, "tp " + std::to_string(n));
  }
}

// Collectives for R = 1 and R = 9 rows of the same kinds, on every rank alike.
int64_t collectives_for(const std::vector<RowSampling>& kinds, int64_t R, int n, int64_t V,
                        Rng& rng) {
  std::vector<RowSampling> rows;
  for (int64_t r = 0; r < R; ++r) rows.push_back(kinds[size_t(r) % kinds.size()]);
  const auto logits = random_logits(rng, R, V);
  const BatchRun run = run_batch(logits, V, rows, n);
  expect_matches_naive(run, logits, rows, "count R " + std::to_string(R));
  for (int k = 1; k < n; ++k) EXPECT_EQ(run.collectives[size_t(k)], run.collectives[0]);
  return run.collectives[0];
}

TEST(BatchSampler, CollectivesDoNotGrowWithTheRows) {
  TP_SEED_TRACE();
  Rng rng(5);
  const int64_t V = 1000;
  RowSampling greedy, greedy_lp, temp, topk, minp, topp;
  greedy_lp.top_logprobs = 5;
  greedy_lp.counts = {{3, 2}, {900, 1}};
  greedy_lp.params.frequency_penalty = 0.5f;
  greedy_lp.params.presence_penalty = 0.3f;
  temp.params = {.temperature = 0.8f};
  temp.u = 0.3;
  temp.top_logprobs = 2;
  temp.counts = {{10, 1}};
  temp.params.presence_penalty = 1;
  topk.params = {.temperature = 1.0f, .top_k = 20};
  topk.u = 0.9;
  minp.params = {.temperature = 1.0f, .min_p = 0.1f};
  minp.u = 0.6;
  topp.params = {.temperature = 1.0f, .top_k = 50, .top_p = 0.9f};
  topp.u = 0.4;
  for (int n : {1, 2, 3}) {
    SCOPED_TRACE("tp " + std::to_string(n));
    EXPECT_EQ(collectives_for({greedy}, 1, n, V, rng), 1);
    EXPECT_EQ(collectives_for({greedy}, 9, n, V, rng), 1);
    EXPECT_EQ(collectives_for({greedy, greedy_lp}, 1, n, V, rng), 1);
    EXPECT_EQ(collectives_for({greedy, greedy_lp}, 9, n, V, rng), 1);
    EXPECT_EQ(collectives_for({temp, topk, minp, greedy_lp}, 1, n, V, rng), 3);
    EXPECT_EQ(collectives_for({temp, topk, minp, greedy_lp}, 9, n, V, rng), 3);
    // Top-p: the slowest row's bisection sets the rounds (at most 32), never the row count.
    const int64_t one = collectives_for({topp}, 1, n, V, rng);
    const int64_t nine = collectives_for({topp, temp, greedy_lp}, 9, n, V, rng);
    EXPECT_GE(one, 4);
    EXPECT_LE(one, 3 + 32);
    EXPECT_LE(nine, 3 + 32);
  }
  // The same top-p row nine times takes exactly the rounds of one copy.
  const auto logits1 = random_logits(rng, 1, V);
  std::vector<std::vector<float>> logits9(9, logits1[0]);
  std::vector<RowSampling> rows9(9, topp);
  for (int n : {1, 2, 3}) {
    const BatchRun one = run_batch(logits1, V, {topp}, n);
    const BatchRun nine = run_batch(logits9, V, rows9, n);
    EXPECT_EQ(one.collectives[0], nine.collectives[0]) << "tp " << n;
    expect_matches_naive(nine, logits9, rows9, "nine copies tp " + std::to_string(n));
  }
  // No rows: no collectives.
  EXPECT_EQ(run_batch({}, V, {}, 2).collectives[0], 0);
}

TEST(BatchSampler, RejectsBadInput) {
  std::vector<std::vector<float>> logits(1, std::vector<float>(10, 0.0f));
  auto rejects = [&](auto edit) {
    RowSampling s;
    edit(s);
    EXPECT_THROW(run_batch(logits, 10, {s}, 1), Error);
  };
  rejects([](RowSampling& s) { s.params.temperature = -1; });
  rejects([](RowSampling& s) { s.params = {.temperature = 1, .top_p = 0}; });
  rejects([](RowSampling& s) { s.params = {.temperature = 1, .min_p = 1}; });
  rejects([](RowSampling& s) { s.params.temperature = 1, s.u = 1.0; });
  rejects([](RowSampling& s) { s.counts = {{3, 1}, {3, 2}}; });  // a token twice
  rejects([](RowSampling& s) { s.counts = {{3, -1}}; });
  rejects([](RowSampling& s) { s.top_logprobs = -2; });
  rejects([](RowSampling& s) { s.params.repetition_penalty = 0; });
  rejects([](RowSampling& s) { s.params.frequency_penalty = NAN; });
  // Shape: two rows of logits for one row of params.
  launch_ranks({.backend = Backend::kThreads, .n_ranks = 1, .threads_per_rank = 1},
               [&](Communicator& tp) {
                 Tensor t = Tensor::zeros({2, 10}, DType::kF32);
                 const std::vector<RowSampling> rows(1);
                 EXPECT_THROW(sample_batch(t, {0, 10}, rows, tp), Error);
                 Tensor wrong_vocab = Tensor::zeros({1, 10}, DType::kF32);
                 EXPECT_THROW(sample_batch(wrong_vocab, {0, 9}, rows, tp), Error);
               });
}

}  // namespace
}  // namespace tensorpar

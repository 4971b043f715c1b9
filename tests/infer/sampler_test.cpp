// The sharded sampler against the naive sampler on the full row, at several TP sizes.
#include <cmath>
#include <mutex>
#include <vector>

#include "comm/launch.h"
#include "infer/sampler.h"
#include "parallel/partition.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::Rng;

// Runs `draws` samples at tp = n and checks each equals the naive choice with the same u.
void check_matches_naive(const SamplingParams& p, int n, int64_t V, int draws, uint64_t salt) {
  Rng rng(salt);
  std::vector<std::vector<float>> rows(static_cast<size_t>(draws));
  for (auto& r : rows) r = rng.uniform_vec(size_t(V), -4, 4);
  // Plant ties and a dominant token in some rows.
  rows[0][size_t(V / 2)] = 10;
  if (V > 3) rows[0][3] = 10;
  std::vector<std::vector<int32_t>> got(static_cast<size_t>(n));
  launch_ranks({.backend = Backend::kThreads, .n_ranks = n, .threads_per_rank = 1, .comm = CommOptions::from_env()},
               [&](Communicator& tp) {
                 Sampler s(p);
                 const Range vr = vocab_range(V, tp.size(), tp.rank());
                 for (auto& row : rows) got[size_t(tp.rank())].push_back(s.sample(row.data() + vr.begin, vr, tp));
               });
  Sampler ref(p);  // the same stream of uniforms
  for (int d = 0; d < draws; ++d) {
    const double u = p.temperature > 0 ? ref.next_uniform() : 0.0;
    const int32_t want = sample_full_naive(rows[size_t(d)].data(), V, p, u);
    for (int r = 0; r < n; ++r) ASSERT_EQ(got[size_t(r)][size_t(d)], want) << "rank " << r << " draw " << d << " tp " << n;
  }
}

TEST(Sampler, GreedyIsExactArgmaxLowestIdOnTies) {
  TP_SEED_TRACE();
  for (int n : {1, 2, 3, 4}) check_matches_naive({}, n, 33, 20, 1);
  // Naive greedy picks the lowest index among ties (10 at 3 and at V/2).
  std::vector<float> row(33, 0.f);
  row[3] = row[16] = 10;
  EXPECT_EQ(sample_full_naive(row.data(), 33, {}, 0), 3);
}

TEST(Sampler, FiltersMatchTheFullRowAtEveryTpSize) {
  TP_SEED_TRACE();
  const SamplingParams cases[] = {
      {.temperature = 1.0f, .seed = 7},
      {.temperature = 0.7f, .top_k = 5, .seed = 8},
      {.temperature = 1.3f, .top_p = 0.8f, .seed = 9},
      {.temperature = 0.9f, .min_p = 0.1f, .seed = 10},
      {.temperature = 1.0f, .top_k = 40, .top_p = 0.9f, .min_p = 0.05f, .seed = 11},
      {.temperature = 1.0f, .top_k = 1, .seed = 12},
  };
  int c = 0;
  for (const auto& p : cases)
    for (int n : {1, 2, 3, 4}) check_matches_naive(p, n, 577, 25, uint64_t(100 + c++));
}

TEST(Sampler, NaiveTopKAndTopPKeepTheRightSets) {
  // Independent check of the oracle: probabilities 0.5, 0.3, 0.15, 0.05 (logits = log p).
  const float l[4] = {std::log(0.05f), std::log(0.5f), std::log(0.15f), std::log(0.3f)};
  // top-p 0.75 keeps {1, 3} (0.5 + 0.3 >= 0.75); u just under 0.5/0.8 picks 1, just over picks 3.
  SamplingParams p{.temperature = 1.0f, .top_p = 0.75f};
  EXPECT_EQ(sample_full_naive(l, 4, p, 0.62), 1);
  EXPECT_EQ(sample_full_naive(l, 4, p, 0.63), 3);
  EXPECT_EQ(sample_full_naive(l, 4, p, 0.999), 3);
  // top-k 3 keeps {1, 2, 3}: total 0.95; u = 0.99 lands on the last kept (3).
  p = {.temperature = 1.0f, .top_k = 3};
  EXPECT_EQ(sample_full_naive(l, 4, p, 0.99), 3);
  EXPECT_EQ(sample_full_naive(l, 4, p, 0.0), 1);
  // min-p 0.2: keeps p >= 0.1 -> {1, 2, 3}.
  p = {.temperature = 1.0f, .min_p = 0.2f};
  EXPECT_EQ(sample_full_naive(l, 4, p, 0.0), 1);
}

TEST(Sampler, TemperatureSamplingFollowsTheSoftmax) {
  TP_SEED_TRACE();
  // 4000 draws at tp 3 over V = 7: counts within 5 standard deviations of the softmax.
  const int64_t V = 7;
  const std::vector<float> row = {0.1f, -1.0f, 0.7f, 2.0f, -0.3f, 1.1f, 0.0f};
  const float T = 0.8f;
  std::vector<int> counts(static_cast<size_t>(V), 0);
  std::mutex mu;
  const int draws = 4000;
  launch_ranks({.backend = Backend::kThreads, .n_ranks = 3, .threads_per_rank = 1, .comm = CommOptions::from_env()},
               [&](Communicator& tp) {
                 Sampler s({.temperature = T, .seed = testing::test_seed()});
                 const Range vr = vocab_range(V, tp.size(), tp.rank());
                 for (int i = 0; i < draws; ++i) {
                   const int32_t id = s.sample(row.data() + vr.begin, vr, tp);
                   if (tp.rank() == 0) {
                     std::lock_guard<std::mutex> lk(mu);
                     ++counts[size_t(id)];
                   }
                 }
               });
  double z = 0;
  for (float x : row) z += std::exp(double(x) / T);
  for (int64_t v = 0; v < V; ++v) {
    const double pv = std::exp(double(row[size_t(v)]) / T) / z;
    const double mean = pv * draws, sd = std::sqrt(draws * pv * (1 - pv));
    EXPECT_NEAR(counts[size_t(v)], mean, 5 * sd + 1) << "token " << v;
  }
}

TEST(Sampler, RejectsBadParams) {
  EXPECT_THROW(Sampler({.temperature = -1}), Error);
  EXPECT_THROW(Sampler({.temperature = 1, .top_p = 0}), Error);
  EXPECT_THROW(Sampler({.temperature = 1, .min_p = 1}), Error);
}

}  // namespace
}  // namespace tensorpar

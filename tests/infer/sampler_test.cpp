// The naive sampler's own definition, parameter validation, and the sampling path as a whole
// against the softmax. The sharded sampler against the naive one: batch_sampler_test.cpp.
#include <cmath>
#include <mutex>
#include <vector>

#include "comm/launch.h"
#include "infer/batch_sampler.h"
#include "infer/sampler.h"
#include "infer/sequence_sampler.h"
#include "parallel/partition.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::Rng;

TEST(Sampler, NaiveGreedyIsTheArgmaxLowestIdOnTies) {
  // Naive greedy picks the lowest index among ties (10 at 3 and at 16).
  std::vector<float> row(33, 0.f);
  row[3] = row[16] = 10;
  EXPECT_EQ(sample_full_naive(row.data(), 33, {}, 0), 3);
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

// The whole path a sequence samples through (SequenceSampler's draws, the sharded batch
// sampler) at tp 3: 4000 draws over V = 7, counts within 5 standard deviations of the softmax.
TEST(Sampler, TemperatureSamplingFollowsTheSoftmax) {
  TP_SEED_TRACE();
  const int64_t V = 7;
  const std::vector<float> row = {0.1f, -1.0f, 0.7f, 2.0f, -0.3f, 1.1f, 0.0f};
  const float T = 0.8f;
  std::vector<int> counts(static_cast<size_t>(V), 0);
  std::mutex mu;
  const int draws = 4000;
  launch_ranks({.backend = Backend::kThreads, .n_ranks = 3, .threads_per_rank = 1, .comm = CommOptions::from_env()},
               [&](Communicator& tp) {
                 SequenceSampler s({.temperature = T, .seed = testing::test_seed()}, {});
                 const Range vr = vocab_range(V, tp.size(), tp.rank());
                 Tensor local = Tensor::empty({1, vr.size()}, DType::kF32);
                 for (int i = 0; i < draws; ++i) {
                   std::copy_n(row.data() + vr.begin, vr.size(), local.data<float>());
                   const RowSampling r = s.next_row();
                   const int32_t id = sample_batch(local, vr, std::span(&r, 1), tp)[0].token;
                   s.accept(id);
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
  EXPECT_THROW(validate({.temperature = -1}), Error);
  EXPECT_THROW(validate({.temperature = NAN}), Error);
  EXPECT_THROW(validate({.temperature = 1, .top_k = -1}), Error);
  EXPECT_THROW(validate({.temperature = 1, .top_p = 0}), Error);
  EXPECT_THROW(validate({.temperature = 1, .min_p = 1}), Error);
  EXPECT_THROW(validate({.repetition_penalty = 0}), Error);
  EXPECT_THROW(validate({.repetition_penalty = 11}), Error);
  EXPECT_THROW(validate({.frequency_penalty = INFINITY}), Error);
  EXPECT_THROW(validate({.presence_penalty = NAN}), Error);
  EXPECT_NO_THROW(validate({.temperature = 0.7f, .top_k = 40, .top_p = 0.9f, .min_p = 0.05f,
                            .repetition_penalty = 1.1f, .frequency_penalty = -2,
                            .presence_penalty = 2}));
}

}  // namespace
}  // namespace tensorpar

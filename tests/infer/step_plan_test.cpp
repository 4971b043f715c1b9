// Step plans: the encoding round-trips every field (floats and the draw bit for bit), corrupt
// words are refused with an error, and a broadcast plan reaches every rank of a TP group.
#include <gtest/gtest.h>

#include "comm/launch.h"
#include "infer/step_plan.h"

namespace tensorpar {
namespace {

StepPlan sample_plan() {
  StepPlan p;
  p.kind = StepPlan::Kind::kRun;
  StepSeq a;
  a.id = 3, a.pos0 = 17, a.tokens = {5, 6, 7}, a.blocks = {9, 2};
  StepSeq b;
  b.id = 4, b.pos0 = 0, b.tokens = {1}, b.blocks = {0}, b.sample = true;
  b.sampling.params.temperature = 0.7f, b.sampling.params.top_k = 40, b.sampling.params.top_p = 0.9f;
  b.sampling.params.min_p = 0.05f, b.sampling.u = 0.123456789012345;
  b.sampling.params.frequency_penalty = 0.5f, b.sampling.params.presence_penalty = -0.25f;
  b.sampling.params.repetition_penalty = 1.25f;
  b.sampling.top_logprobs = 3;
  b.sampling.counts = {{11, 2}, {12, 1}};
  p.seqs = {a, b};
  return p;
}

void expect_equal(const StepPlan& x, const StepPlan& y) {
  ASSERT_EQ(x.kind, y.kind);
  ASSERT_EQ(x.seqs.size(), y.seqs.size());
  for (size_t i = 0; i < x.seqs.size(); ++i) {
    const StepSeq &a = x.seqs[i], &b = y.seqs[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.pos0, b.pos0);
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_EQ(a.blocks, b.blocks);
    EXPECT_EQ(a.sample, b.sample);
    if (!a.sample) continue;
    EXPECT_EQ(a.sampling.params.temperature, b.sampling.params.temperature);
    EXPECT_EQ(a.sampling.params.top_k, b.sampling.params.top_k);
    EXPECT_EQ(a.sampling.params.top_p, b.sampling.params.top_p);
    EXPECT_EQ(a.sampling.params.min_p, b.sampling.params.min_p);
    EXPECT_EQ(a.sampling.u, b.sampling.u);
    EXPECT_EQ(a.sampling.params.frequency_penalty, b.sampling.params.frequency_penalty);
    EXPECT_EQ(a.sampling.params.repetition_penalty, b.sampling.params.repetition_penalty);
    EXPECT_EQ(a.sampling.params.presence_penalty, b.sampling.params.presence_penalty);
    EXPECT_EQ(a.sampling.top_logprobs, b.sampling.top_logprobs);
    EXPECT_EQ(a.sampling.counts, b.sampling.counts);
  }
}

TEST(StepPlan, EncodingRoundTrips) { expect_equal(decode_plan(encode_plan(sample_plan())), sample_plan()); }

TEST(StepPlan, CorruptWordsAreRefused) {
  std::vector<int64_t> w = encode_plan(sample_plan());
  EXPECT_THROW(decode_plan(std::vector<int64_t>(w.begin(), w.end() - 1)), Error);
  std::vector<int64_t> bad_kind = w;
  bad_kind[0] = 9;
  EXPECT_THROW(decode_plan(bad_kind), Error);
  std::vector<int64_t> trailing = w;
  trailing.push_back(0);
  EXPECT_THROW(decode_plan(trailing), Error);
  std::vector<int64_t> huge = w;
  huge[1] = int64_t(1) << 40;  // sequence count
  EXPECT_THROW(decode_plan(huge), Error);
}

TEST(StepPlan, BroadcastReachesEveryRank) {
  LaunchConfig cfg;
  cfg.backend = Backend::kThreads;
  cfg.n_ranks = 3;
  cfg.threads_per_rank = 1;
  cfg.comm = CommOptions::from_env();  // TENSORPAR_COMM_TIMEOUT (scripts/test.sh: 60 s)
  launch_ranks(cfg, [&](Communicator& world) {
    const StepPlan got = broadcast_plan(world.rank() == 0 ? sample_plan() : StepPlan{}, world);
    expect_equal(got, sample_plan());
  });
}

}  // namespace
}  // namespace tensorpar

// The continuous-batching scheduler without a model: plans are checked row by row (which
// sequence, positions, block tables, which rows sample) for chunked prefill under the token
// budget, decode rows first, the running-sequence cap, admission that waits for blocks,
// preemption of the youngest when the pool runs out (and its exact recomputation later), and
// prefix-cache hits that skip the shared part of a prompt.
#include <gtest/gtest.h>

#include <numeric>

#include "serve/scheduler.h"

namespace tensorpar {
namespace {

std::unique_ptr<Sequence> make_seq(int64_t id, int64_t n_prompt, int32_t first = 1, int64_t max_tokens = 100) {
  auto s = std::make_unique<Sequence>();
  s->id = id;
  s->tokens.resize(size_t(n_prompt));
  std::iota(s->tokens.begin(), s->tokens.end(), first);
  s->n_prompt = n_prompt;
  s->params.max_tokens = max_tokens;
  s->sampler.emplace(s->params.sampling, s->tokens);
  return s;
}

// Runs a plan as if every sampling row drew token 7.
void step(Scheduler& s, const StepPlan& p) {
  std::vector<RowSample> x;
  for (const StepSeq& r : p.seqs)
    if (r.sample) x.push_back(RowSample{7, 0, {}});
  s.apply(p, x);
}

SchedulerOptions opts(int64_t max_seqs, int64_t budget, int64_t n_blocks, int64_t bs = 4) {
  SchedulerOptions o;
  o.max_seqs = max_seqs, o.max_batch_tokens = budget, o.n_blocks = n_blocks, o.block_size = bs;
  return o;
}

TEST(Scheduler, ChunkedPrefillUnderTheBudget) {
  Scheduler s(opts(4, 8, 16));
  s.add(make_seq(1, 20));
  std::vector<int64_t> starts, sizes;
  for (int i = 0; i < 3; ++i) {
    const StepPlan p = s.plan();
    ASSERT_EQ(p.seqs.size(), 1u);
    starts.push_back(p.seqs[0].pos0);
    sizes.push_back(int64_t(p.seqs[0].tokens.size()));
    EXPECT_EQ(p.seqs[0].sample, i == 2);
    EXPECT_GE(int64_t(p.seqs[0].blocks.size()) * 4, p.seqs[0].pos0 + int64_t(p.seqs[0].tokens.size()));
    step(s, p);
  }
  EXPECT_EQ(starts, (std::vector<int64_t>{0, 8, 16}));
  EXPECT_EQ(sizes, (std::vector<int64_t>{8, 8, 4}));
  // Then one decode row of the sampled token at position 20.
  const StepPlan d = s.plan();
  ASSERT_EQ(d.seqs.size(), 1u);
  EXPECT_EQ(d.seqs[0].pos0, 20);
  EXPECT_EQ(d.seqs[0].tokens, std::vector<int32_t>{7});
  EXPECT_TRUE(d.seqs[0].sample);
}

TEST(Scheduler, DecodeRowsComeFirstAndPromptsFillTheRest) {
  Scheduler s(opts(4, 6, 32));
  s.add(make_seq(1, 3));
  step(s, s.plan());  // seq 1 prefilled, now decoding
  s.add(make_seq(2, 10));
  const StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].id, 1);
  EXPECT_EQ(p.seqs[0].tokens.size(), 1u);
  EXPECT_EQ(p.seqs[1].id, 2);
  EXPECT_EQ(p.seqs[1].tokens.size(), 5u);  // budget 6 - 1 decode row
  EXPECT_FALSE(p.seqs[1].sample);
}

TEST(Scheduler, PrefillCapAppliesOnlyBesideDecodeRows) {
  Scheduler s(opts(4, 64, 32));
  s.add(make_seq(1, 20));
  const StepPlan alone = s.plan(/*prefill_cap=*/3);  // no decode rows: the whole budget
  ASSERT_EQ(alone.seqs.size(), 1u);
  EXPECT_EQ(alone.seqs[0].tokens.size(), 20u);
  step(s, alone);
  s.add(make_seq(2, 20, /*first=*/50));
  const StepPlan p = s.plan(/*prefill_cap=*/3);
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].tokens.size(), 1u);  // seq 1 decodes
  EXPECT_EQ(p.seqs[1].tokens.size(), 3u);  // seq 2's chunk is capped
}

TEST(Scheduler, RunningSequencesAreCapped) {
  Scheduler s(opts(2, 64, 64));
  for (int64_t id = 1; id <= 3; ++id) s.add(make_seq(id, 2));
  const StepPlan p = s.plan();
  EXPECT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(s.running(), 2);
  EXPECT_EQ(s.waiting(), 1);
  step(s, p);
  s.finish(1);
  const StepPlan q = s.plan();  // seq 2 decodes, seq 3 is admitted
  ASSERT_EQ(q.seqs.size(), 2u);
  EXPECT_EQ(q.seqs[1].id, 3);
}

TEST(Scheduler, AdmissionWaitsForBlocks) {
  Scheduler s(opts(4, 64, 4));  // 4 blocks of 4 tokens
  s.add(make_seq(1, 12));       // 3 blocks
  step(s, s.plan());
  s.add(make_seq(2, 8));        // needs 2 blocks, 1 free
  const StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 1);
  EXPECT_EQ(s.waiting(), 1);
  s.finish(1);
  EXPECT_EQ(s.blocks().used_blocks(), 0);
  const StepPlan q = s.plan();
  ASSERT_EQ(q.seqs.size(), 1u);
  EXPECT_EQ(q.seqs[0].id, 2);
}

TEST(Scheduler, FullPoolPreemptsTheYoungestWhichIsRecomputedLater) {
  Scheduler s(opts(4, 64, 4, 4));  // 16 tokens in all
  s.add(make_seq(1, 7));
  s.add(make_seq(2, 7, /*first=*/100));  // no prefix in common
  step(s, s.plan());  // both prefilled: 2 blocks each, pool full; both hold 8 tokens' room
  step(s, s.plan());  // decode at position 7: still inside the second block
  EXPECT_EQ(s.running(), 2);
  // Position 8 needs a third block for each: seq 1 (older) takes seq 2's.
  const StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].id, 1);
  EXPECT_EQ(p.seqs[0].pos0, 8);
  EXPECT_EQ(s.preemptions(), 1);
  EXPECT_EQ(s.running(), 1);
  EXPECT_EQ(s.waiting(), 1);
  Sequence* two = s.find(2);
  ASSERT_NE(two, nullptr);
  EXPECT_EQ(two->computed, 0);
  EXPECT_TRUE(two->blocks.empty());
  EXPECT_EQ(two->tokens.size(), 9u);  // 7 prompt + 2 generated, kept
  step(s, p);
  s.finish(1);
  // Readmitted: its whole history is recomputed from position 0 and its next token sampled.
  const StepPlan q = s.plan();
  ASSERT_EQ(q.seqs.size(), 1u);
  EXPECT_EQ(q.seqs[0].id, 2);
  EXPECT_EQ(q.seqs[0].pos0 + int64_t(q.seqs[0].tokens.size()), 9);
  EXPECT_TRUE(q.seqs[0].sample);
}

TEST(Scheduler, PrefixCacheSkipsTheSharedPrompt) {
  Scheduler s(opts(4, 64, 32, 4));
  s.add(make_seq(1, 10));  // tokens 1..10: blocks [1..4], [5..8] full after prefill
  step(s, s.plan());
  s.finish(1);
  s.add(make_seq(2, 11));  // the same first 10 tokens + one more
  const StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 1u);
  EXPECT_EQ(p.seqs[0].pos0, 8);  // two cached blocks reused
  EXPECT_EQ(p.seqs[0].tokens.size(), 3u);
  EXPECT_EQ(s.find(2)->cached_prompt_tokens, 8);
  EXPECT_EQ(s.blocks().prefix_hit_tokens(), 8);
  // A prompt that differs in its first token shares nothing.
  s.add(make_seq(3, 11, /*first=*/2));
  const StepPlan q = s.plan();
  ASSERT_EQ(q.seqs.size(), 2u);
  EXPECT_EQ(q.seqs[1].id, 3);
  EXPECT_EQ(q.seqs[1].pos0, 0);
}

TEST(Scheduler, SamplingDrawsFollowTheRequestSeed) {
  Scheduler s(opts(2, 64, 16));
  for (int64_t id : {1, 2}) {
    auto q = make_seq(id, 3);
    q->params.sampling.temperature = 1.0f;
    q->params.sampling.seed = 42;
    q->sampler.emplace(q->params.sampling, q->tokens);
    s.add(std::move(q));
  }
  const StepPlan p = s.plan();
  ASSERT_EQ(p.seqs.size(), 2u);
  EXPECT_EQ(p.seqs[0].sampling.u, p.seqs[1].sampling.u);  // same seed, same first draw
  EXPECT_GT(p.seqs[0].sampling.u, 0.0);
  EXPECT_LT(p.seqs[0].sampling.u, 1.0);
}

TEST(Scheduler, RejectsBudgetBelowRunningCap) {
  EXPECT_THROW(Scheduler(opts(8, 4, 16)), Error);
}

}  // namespace
}  // namespace tensorpar

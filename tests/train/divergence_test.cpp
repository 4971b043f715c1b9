// Training incident response: the verdicts on a step, skipped-batch numbering, and whole runs with
// a poisoned batch. A run that rolls back past a poisoned batch must end exactly (bit for bit) like
// a run told to skip that batch from the start; with the default policy the run stops naming the
// step and batch, and the poisoned step never reaches the weights.
#include "train/divergence.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <mutex>

#include "fixtures_dir.h"
#include "parallel/mesh.h"
#include "tokenizer/tokenizer.h"
#include "train/train_test_util.h"
#include "train/trainer.h"

namespace tensorpar::testing {
namespace {

namespace fs = std::filesystem;

TEST(Divergence, VerdictsOnLossAndGradientNorm) {
  DivergenceMonitor m({.spike_factor = 2.0, .spike_window = 4});
  EXPECT_FALSE(m.verdict(5.0f, 1.0).has_value());
  EXPECT_NE(m.verdict(NAN, 1.0).value_or("").find("non-finite loss"), std::string::npos);
  EXPECT_NE(m.verdict(INFINITY, 1.0).value_or("").find("non-finite loss"), std::string::npos);
  EXPECT_NE(m.verdict(5.0f, NAN).value_or("").find("non-finite gradient norm"), std::string::npos);
  EXPECT_NE(m.verdict(5.0f, INFINITY).value_or("").find("non-finite gradient norm"), std::string::npos);
  // No spike verdict before three accepted losses, however large the loss.
  m.accept(4.0f);
  m.accept(4.0f);
  EXPECT_FALSE(m.verdict(100.0f, 1.0).has_value());
  m.accept(4.0f);
  EXPECT_DOUBLE_EQ(m.running_mean(), 4.0);
  EXPECT_FALSE(m.verdict(8.0f, 1.0).has_value());  // exactly 2 x the mean is not above it
  const std::optional<std::string> spike = m.verdict(8.5f, 1.0);
  ASSERT_TRUE(spike.has_value());
  EXPECT_NE(spike->find("loss spike"), std::string::npos) << *spike;
  // The window keeps the last spike_window losses: after 1,1,1,1 the 4s are gone.
  for (int i = 0; i < 4; ++i) m.accept(1.0f);
  EXPECT_DOUBLE_EQ(m.running_mean(), 1.0);
  EXPECT_TRUE(m.verdict(2.5f, 1.0).has_value());
  // The window round-trips through a checkpoint's JSON.
  DivergenceMonitor back({.spike_factor = 2.0, .spike_window = 4});
  back.from_json(m.to_json());
  EXPECT_DOUBLE_EQ(back.running_mean(), 1.0);
  EXPECT_THROW(back.from_json(nlohmann::json("x")), Error);
  // Without a spike factor only non-finite values diverge.
  DivergenceMonitor plain({});
  for (int i = 0; i < 5; ++i) plain.accept(1.0f);
  EXPECT_FALSE(plain.verdict(1e6f, 1e6).has_value());
}

TEST(Divergence, PolicyAndPoisonSpecAreChecked) {
  EXPECT_NO_THROW(check_divergence_policy({}));
  EXPECT_THROW(check_divergence_policy({.spike_factor = 0.5}), Error);
  EXPECT_THROW(check_divergence_policy({.spike_factor = NAN}), Error);
  EXPECT_THROW(check_divergence_policy({.spike_window = 2}), Error);
  EXPECT_THROW(check_divergence_policy({.max_rollbacks = -1}), Error);
  const PoisonedBatch p = parse_poisoned_batch("batch:7,kind:spike");
  EXPECT_EQ(p.batch, 7);
  EXPECT_EQ(p.kind, PoisonedBatch::Kind::kSpike);
  EXPECT_EQ(parse_poisoned_batch("kind:nan,batch:1").kind, PoisonedBatch::Kind::kNan);
  for (const char* bad : {"", "batch:7", "kind:nan", "batch:0,kind:nan", "batch:x,kind:nan", "batch:7,kind:inf",
                          "batch:7,kind:nan,batch:8", "batch:7,kind:nan,step:3", "batch7,kind:nan"}) {
    EXPECT_THROW(parse_poisoned_batch(bad), Error) << bad;
  }
}

TEST(Divergence, SkippedBatchesShiftLaterSteps) {
  EXPECT_EQ(batch_for_step(0, {}), 1);
  EXPECT_EQ(batch_for_step(9, {}), 10);
  const std::vector<int64_t> skipped = merge_skipped({5, 3}, {5, 6});
  EXPECT_EQ(skipped, (std::vector<int64_t>{3, 5, 6}));
  // Step indices 0.. take batches 1, 2, 4, 7, 8, ...
  const int64_t want[] = {1, 2, 4, 7, 8, 9};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(batch_for_step(i, skipped), want[i]) << "step index " << i;
  EXPECT_THROW(merge_skipped({0}, {}), Error);
}

// Real text and a tiny Llama over the fixture tokenizer (as in trainer_test.cpp).
const std::string kTokenizer = test::fixtures_dir() + "/tokenizer/gpt2_trained.tokenizer.json";

struct RunResult {
  std::vector<StepLog> logs;  // world rank 0's, incidents included
  Gathered params;            // DP replica 0's final parameters
  RunTotals totals;
  std::vector<int64_t> skipped;
};

class PoisonedRun : public ::testing::Test {
 protected:
  void SetUp() override {
    corpus_ = tokenize_corpus({test::fixtures_dir() + "/README.md"}, Tokenizer::from_json_file(kTokenizer),
                              0.1, 16);
    config_ = tiny_llama(Tokenizer::from_json_file(kTokenizer).vocab_size());
    config_.tie_embeddings = true;
    base_.steps = 10;
    base_.batch = 4;
    base_.micro_batch = 2;
    base_.seq = 16;
    base_.lr = 1e-2f;
    base_.warmup = 1;
    root_ = ::testing::TempDir() + "divergence_" + std::to_string(::getpid());
    fs::remove_all(root_);
  }
  void TearDown() override { fs::remove_all(root_); }

  RunResult run(int tp, int dp, const TrainOptions& o) {
    RunResult r;
    std::mutex mu;
    run_model_ranks(tp * dp, [&](Communicator& world) {
      DeviceMesh mesh(world, {.tp = tp, .dp = dp});
      auto m = init_model(config_, mesh.tp(), 21);
      Trainer t(*m, corpus_, o, dp > 1 ? &mesh.dp() : nullptr);
      t.run([&](const StepLog& l) {
        if (world.rank() == 0) r.logs.push_back(l);
      });
      if (mesh.dp_rank() == 0)
        for (const ParamShard& p : m->parameters()) gather_into(r.params, mu, p, *p.value);
      if (world.rank() == 0) r.totals = t.totals(), r.skipped = t.skipped_batches();
    });
    return r;
  }

  TokenCorpus corpus_;
  ModelConfig config_;
  TrainOptions base_;
  std::string root_;
};

// Batch 6 poisoned with NaN gradients; checkpoints every 4 steps: the run rolls back to step-4,
// replays step 5, skips batch 6 and ends like the run that skips batch 6 from the start, bit for
// bit, at tp 1 and at tp 2 x dp 2.
TEST_F(PoisonedRun, RollbackEndsLikeARunThatNeverSawTheBatch) {
  for (const auto& [tp, dp] : {std::pair{1, 1}, std::pair{2, 2}}) {
    SCOPED_TRACE("tp " + std::to_string(tp) + " dp " + std::to_string(dp));
    TrainOptions clean = base_;
    clean.skip_batches = {6};
    const RunResult want = run(tp, dp, clean);
    ASSERT_EQ(want.logs.size(), 10u);
    EXPECT_EQ(want.totals.incidents, 0);

    TrainOptions poisoned = base_;
    poisoned.out_dir = root_ + "_" + std::to_string(tp);
    poisoned.save_every = 4;
    poisoned.divergence.rollback = true;
    poisoned.poison = {.batch = 6, .kind = PoisonedBatch::Kind::kNan};
    const RunResult got = run(tp, dp, poisoned);
    fs::remove_all(poisoned.out_dir);
    // Steps 1..5, the incident at step 6, then 5 again (replayed from step-4) through 10.
    ASSERT_EQ(got.logs.size(), 12u);
    const StepLog& inc = got.logs[5];
    ASSERT_TRUE(inc.incident.has_value());
    EXPECT_EQ(inc.step, 6);
    EXPECT_EQ(inc.incident->batch, 6);
    EXPECT_NE(inc.incident->reason.find("non-finite gradient norm"), std::string::npos) << inc.incident->reason;
    EXPECT_EQ(fs::path(inc.incident->rolled_back_to).filename(), "step-4");
    EXPECT_EQ(inc.incident->skipped_batches, std::vector<int64_t>{6});
    EXPECT_EQ(got.logs[6].step, 5);
    EXPECT_EQ(got.logs[6].loss, got.logs[4].loss) << "the replayed step 5 differs from the first";
    EXPECT_EQ(got.totals.incidents, 1);
    EXPECT_EQ(got.totals.rollbacks, 1);
    EXPECT_EQ(got.totals.optimizer_steps, 11);  // 5 + 6 (5 again through 10)
    EXPECT_EQ(got.skipped, std::vector<int64_t>{6});
    EXPECT_EQ(got.logs.back().step, 10);
    EXPECT_EQ(got.logs.back().loss, want.logs.back().loss);
    EXPECT_EQ(got.logs.back().grad_norm, want.logs.back().grad_norm);
    for (const auto& [name, v] : want.params) EXPECT_EQ(got.params.at(name), v) << name;
  }
}

// The default policy stops at the poisoned step with a message naming it and its batch; the
// weights are those after step 2, as a clean run's are.
TEST_F(PoisonedRun, StopPolicyNamesTheStepAndKeepsTheWeights) {
  TrainOptions clean = base_;
  clean.steps = 2;
  const RunResult want = run(2, 1, clean);
  TrainOptions poisoned = base_;
  poisoned.poison = {.batch = 3, .kind = PoisonedBatch::Kind::kNan};
  std::vector<std::string> messages(2);
  Gathered params;
  std::mutex mu;
  run_model_ranks(2, [&](Communicator& world) {
    auto m = init_model(config_, world, 21);
    Trainer t(*m, corpus_, poisoned);
    try {
      t.run(nullptr);
    } catch (const Error& e) {
      messages[size_t(world.rank())] = e.what();
    }
    EXPECT_EQ(t.step(), 2);
    for (const ParamShard& p : m->parameters()) gather_into(params, mu, p, *p.value);
  });
  for (const std::string& msg : messages) {
    EXPECT_NE(msg.find("step 3 (batch 3) diverged: non-finite gradient norm"), std::string::npos) << msg;
    EXPECT_NE(msg.find("--skip-batches 3"), std::string::npos) << msg;
  }
  for (const auto& [name, v] : want.params) EXPECT_EQ(params.at(name), v) << name;
  // Rolling back needs somewhere to roll back to.
  TrainOptions no_out = base_;
  no_out.divergence.rollback = true;
  run_model_ranks(1, [&](Communicator& world) {
    auto m = init_model(config_, world, 21);
    EXPECT_THROW(Trainer(*m, corpus_, no_out), Error);
  });
}

// A corrupt batch (every target one rare token) spikes the loss of a model that has learnt the
// text. Its loss is first measured with spike detection off (it must exceed 1.5 x the mean of
// the 5 steps before it, or this test could not judge); then with --spike-factor 1.5 the run
// rolls back past it (to the step-0 checkpoint it saved, having none) and ends like the run that
// skips it; with --max-rollbacks 0 it stops instead.
TEST_F(PoisonedRun, LossSpikeRollsBack) {
  constexpr int64_t kSteps = 30, kPoisoned = 28;
  TrainOptions o = base_;
  o.steps = kSteps;
  o.poison = {.batch = kPoisoned, .kind = PoisonedBatch::Kind::kSpike};
  const RunResult seen = run(1, 1, o);
  ASSERT_EQ(seen.logs.size(), size_t(kSteps));
  double mean = 0;
  for (int64_t i = kPoisoned - 6; i < kPoisoned - 1; ++i) mean += seen.logs[size_t(i)].loss / 5.0;
  const float spike = seen.logs[size_t(kPoisoned - 1)].loss;
  std::printf("  poisoned batch loss %.3f, mean of the 5 steps before %.3f (ratio %.2f)\n", double(spike), mean,
              spike / mean);
  ASSERT_GT(spike, 1.5 * mean) << "the corrupt batch does not spike: the test cannot judge";

  TrainOptions clean = base_;
  clean.steps = kSteps;
  clean.skip_batches = {kPoisoned};
  const RunResult want = run(1, 1, clean);

  o.divergence = {.rollback = true, .spike_factor = 1.5, .spike_window = 5};
  o.out_dir = root_;
  const RunResult got = run(1, 1, o);
  // 1 .. kPoisoned - 1, the incident, 1 .. kSteps again from step-0.
  ASSERT_EQ(got.logs.size(), size_t(kPoisoned - 1 + 1 + kSteps));
  const StepLog& inc = got.logs[size_t(kPoisoned - 1)];
  ASSERT_TRUE(inc.incident.has_value());
  EXPECT_NE(inc.incident->reason.find("loss spike"), std::string::npos) << inc.incident->reason;
  EXPECT_EQ(fs::path(inc.incident->rolled_back_to).filename(), "step-0");
  EXPECT_EQ(got.logs.back().loss, want.logs.back().loss);
  for (const auto& [name, v] : want.params) EXPECT_EQ(got.params.at(name), v) << name;
  fs::remove_all(root_);

  o.divergence.max_rollbacks = 0;
  std::string msg;
  try {
    run(1, 1, o);
  } catch (const Error& e) {
    msg = e.what();
  }
  EXPECT_NE(msg.find("--max-rollbacks 0"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tensorpar::testing

// Checkpoint retention (--keep-last / --keep-every): the rule on its own, the removal on a
// hand-made root (what is never touched: `latest`, steps past it, saves in flight, other files),
// and a training run that saves every step keeping exactly the expected set after every step,
// then resumes from `latest`.
#include "train/checkpoint_retention.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>

#include "train/train_test_util.h"
#include "train/trainer.h"

namespace tensorpar::testing {
namespace {
namespace fs = std::filesystem;

std::string fresh_dir(const std::string& tag) {
  const fs::path p = fs::temp_directory_path() / ("tp_keep_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::set<std::string> entries(const std::string& root) {
  std::set<std::string> out;
  for (const auto& e : fs::directory_iterator(root)) out.insert(e.path().filename().string());
  return out;
}

std::set<std::string> step_dirs(std::initializer_list<int64_t> steps) {
  std::set<std::string> out;
  for (int64_t s : steps) out.insert("step-" + std::to_string(s));
  return out;
}

void fake_checkpoint(const std::string& root, const std::string& name) {
  fs::create_directories(fs::path(root) / name);
  std::ofstream(fs::path(root) / name / "index.json") << "{}";
}

TEST(Retention, RuleKeepsTheNewestAndTheMultiples) {
  const std::vector<int64_t> all = {1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(steps_to_remove(all, 7, {2, 0}), (std::vector<int64_t>{1, 2, 3, 4, 5}));
  EXPECT_EQ(steps_to_remove(all, 7, {2, 3}), (std::vector<int64_t>{1, 2, 4, 5}));
  EXPECT_EQ(steps_to_remove(all, 7, {1, 0}), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(steps_to_remove(all, 7, {10, 0}), std::vector<int64_t>{});
  EXPECT_EQ(steps_to_remove(all, 7, {0, 0}), std::vector<int64_t>{}) << "keep_last 0 keeps all";
  // Steps past `latest` (published, pointer not yet moved) are never candidates, and `latest`
  // is kept even when it is not among the newest.
  EXPECT_EQ(steps_to_remove(all, 4, {1, 0}), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(steps_to_remove(all, -1, {1, 0}), std::vector<int64_t>{}) << "no latest: nothing goes";
}

TEST(Retention, InconsistentFlagsAreNamed) {
  EXPECT_NO_THROW(check_retention({0, 0}));
  EXPECT_NO_THROW(check_retention({3, 100}));
  try {
    check_retention({0, 100});
    ADD_FAILURE() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--keep-every 100"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--keep-last N"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_retention({-1, 0}), Error);
}

TEST(Retention, PruneTouchesOnlyPublishedStepsUpToLatest) {
  const std::string root = fresh_dir("prune");
  for (int s : {1, 2, 3, 4, 5, 6}) fake_checkpoint(root, "step-" + std::to_string(s));
  fake_checkpoint(root, "step-7");  // published, but `latest` was not moved to it yet
  fs::create_directories(root + "/.tmp-step-8");  // a save in flight
  fs::create_directories(root + "/step-9x");      // not a step directory
  fs::create_directories(root + "/.del-step-0");  // a removal a crash interrupted
  std::ofstream(root + "/notes.txt") << "mine";
  std::ofstream(root + "/latest") << "step-5\n";
  const std::vector<std::string> removed = prune_checkpoints(root, {2, 3});
  EXPECT_EQ(removed, (std::vector<std::string>{root + "/step-1", root + "/step-2"}));
  std::set<std::string> want = step_dirs({3, 4, 5, 6, 7});
  want.insert({".tmp-step-8", "step-9x", "notes.txt", "latest"});
  EXPECT_EQ(entries(root), want);
  // Without `latest` nothing is removed.
  fs::remove(root + "/latest");
  EXPECT_TRUE(prune_checkpoints(root, {1, 0}).empty());
  EXPECT_EQ(checkpoint_steps(root), (std::vector<int64_t>{3, 4, 5, 6, 7}));
  fs::remove_all(root);
}

TokenCorpus random_corpus(int64_t n, int64_t vocab) {
  Rng rng(7);
  TokenCorpus c;
  for (int64_t i = 0; i < n; ++i) c.train.push_back(int32_t(rng.integer(0, vocab)));
  return c;
}

// The set `--keep-last 2 --keep-every 3` leaves after a save at `step` (saving every step).
std::set<std::string> expected_after(int64_t step) {
  std::set<std::string> want = {"latest"};
  for (int64_t s = 1; s <= step; ++s)
    if (s > step - 2 || s % 3 == 0) want.insert("step-" + std::to_string(s));
  return want;
}

// Saves every step at tp 2: after each step exactly the expected set is on disk, and the step's
// log names what went; a resumed run continues from `latest` with the policy it stored.
TEST(Retention, TrainingRunKeepsExactlyTheExpectedSetAndResumes) {
  const ModelConfig c = tiny_llama();
  const TokenCorpus corpus = random_corpus(4000, c.vocab_size);
  const std::string root = fresh_dir("train");
  TrainOptions o;
  o.steps = 7;
  o.batch = 2;
  o.micro_batch = 1;
  o.seq = 16;
  o.save_every = 1;
  o.out_dir = root;
  o.retention = {2, 3};
  std::vector<std::set<std::string>> seen;
  std::vector<std::vector<std::string>> removed;
  auto train = [&](int64_t steps, bool resume) {
    o.steps = steps;
    run_model_ranks(2, [&](Communicator& world) {
      auto m = init_model(c, world, 3);
      Trainer t(*m, corpus, o);
      if (resume) {
        t.resume(root);
        EXPECT_EQ(t.step(), 7);
      }
      t.run([&](const StepLog& l) {
        // Rank 0 removes; the other rank may still be in the save's last barrier, so only rank 0
        // looks (it returns from save after its removal).
        if (world.rank() != 0) return;
        seen.push_back(entries(root));
        removed.push_back(l.removed_checkpoints);
        EXPECT_TRUE(std::isfinite(l.loss));
      });
    });
  };
  train(7, false);
  ASSERT_EQ(seen.size(), 7u);
  for (int64_t step = 1; step <= 7; ++step) {
    EXPECT_EQ(seen[size_t(step - 1)], expected_after(step)) << "after step " << step;
    // What went at this step: the one just out of the newest two, unless a multiple of 3.
    const int64_t out = step - 2;
    std::vector<std::string> want;
    if (out >= 1 && out % 3 != 0) want.push_back(root + "/step-" + std::to_string(out));
    EXPECT_EQ(removed[size_t(step - 1)], want) << "after step " << step;
  }
  EXPECT_EQ(latest_step_name(root), 7);
  train(9, true);
  ASSERT_EQ(seen.size(), 9u);
  EXPECT_EQ(seen.back(), expected_after(9));
  EXPECT_EQ(entries(root), (std::set<std::string>{"latest", "step-3", "step-6", "step-8", "step-9"}));
  EXPECT_EQ(latest_step_name(root), 9);
  fs::remove_all(root);
}

}  // namespace
}  // namespace tensorpar::testing

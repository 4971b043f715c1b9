// Run settings recorded in a checkpoint: every setting round-trips through JSON; on resume a
// setting comes from the checkpoint unless its flag was given, and exactly the given flags whose
// value differs are reported. Also where a resumed run saves (checkpoint_root).
#include "train/run_settings.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "train/checkpoint.h"

namespace tensorpar::testing {
namespace {

RunSettings a_run() {
  RunSettings s;
  s.data = "/data/fortunes";
  s.val_fraction = 0.1;
  s.max_data_tokens = 5000;
  s.train.batch = 16;
  s.train.micro_batch = 8;
  s.train.seq = 64;
  s.train.steps = 400;
  s.train.lr = 2e-3f;
  s.train.min_lr = 2e-4f;
  s.train.warmup = 30;
  s.train.clip = 0.5;
  s.train.seed = 99;
  s.train.eval_every = 25;
  s.train.eval_batches = 3;
  s.train.save_every = 100;
  s.train.retention = {3, 1000};
  s.train.adam.weight_decay = 0.01f;
  s.train.compute.matmul_dtype = DType::kBF16;
  s.train.compute.recompute_layers = 2;
  s.train.compute.moe_aux_loss_coef = 0.05;
  s.train.compute.moe_z_loss_coef = 0.001;
  s.train.compute.moe_capacity_factor = 1.25;
  s.train.divergence.rollback = true;
  s.train.divergence.spike_factor = 3.5;
  s.train.divergence.max_rollbacks = 7;
  s.train.skip_batches = {12, 40};
  return s;
}

TEST(RunSettings, EverySettingComesBackFromTheCheckpoint) {
  const nlohmann::json saved = run_settings_json(a_run());
  EXPECT_EQ(saved.size(), 27u);  // a new setting must be added to the list below too
  RunSettings resumed;           // all defaults, as a bare `--resume DIR` parses
  EXPECT_EQ(apply_saved_settings(saved, {}, resumed), "");
  EXPECT_EQ(resumed.data, "/data/fortunes");
  EXPECT_EQ(resumed.val_fraction, 0.1);
  EXPECT_EQ(resumed.max_data_tokens, 5000);
  EXPECT_EQ(resumed.train.batch, 16);
  EXPECT_EQ(resumed.train.micro_batch, 8);
  EXPECT_EQ(resumed.train.seq, 64);
  EXPECT_EQ(resumed.train.steps, 400);
  EXPECT_EQ(resumed.train.lr, 2e-3f);
  EXPECT_EQ(resumed.train.min_lr, 2e-4f);
  EXPECT_EQ(resumed.train.warmup, 30);
  EXPECT_EQ(resumed.train.clip, 0.5);
  EXPECT_EQ(resumed.train.seed, 99u);
  EXPECT_EQ(resumed.train.eval_every, 25);
  EXPECT_EQ(resumed.train.eval_batches, 3);
  EXPECT_EQ(resumed.train.save_every, 100);
  EXPECT_EQ(resumed.train.retention.keep_last, 3);
  EXPECT_EQ(resumed.train.retention.keep_every, 1000);
  EXPECT_EQ(resumed.train.adam.weight_decay, 0.01f);
  EXPECT_EQ(resumed.train.compute.matmul_dtype, DType::kBF16);
  EXPECT_EQ(resumed.train.compute.recompute_layers, 2);
  EXPECT_EQ(resumed.train.compute.moe_aux_loss_coef, 0.05);
  EXPECT_EQ(resumed.train.compute.moe_z_loss_coef, 0.001);
  EXPECT_EQ(resumed.train.compute.moe_capacity_factor, 1.25);
  EXPECT_TRUE(resumed.train.divergence.rollback);
  EXPECT_EQ(resumed.train.divergence.spike_factor, 3.5);
  EXPECT_EQ(resumed.train.divergence.max_rollbacks, 7);
  EXPECT_EQ(resumed.train.skip_batches, (std::vector<int64_t>{12, 40}));
}

TEST(RunSettings, GivenFlagsWinAndOnlyRealChangesAreReported) {
  const nlohmann::json saved = run_settings_json(a_run());
  RunSettings resumed;
  resumed.train.steps = 500;                         // --steps 500: a change
  resumed.train.batch = 16;                          // --batch 16: the same value, not reported
  resumed.train.compute.matmul_dtype = DType::kF32;  // --no-bf16: a change
  const std::string note = apply_saved_settings(saved, {"steps", "batch", "bf16"}, resumed);
  EXPECT_EQ(note, "--steps 400 -> 500, --bf16 true -> false");
  EXPECT_EQ(resumed.train.steps, 500);
  EXPECT_EQ(resumed.train.compute.matmul_dtype, DType::kF32);
  EXPECT_EQ(resumed.train.micro_batch, 8);  // not given: the checkpoint's
}

// A saved value of the wrong kind is an Error naming the setting, never a conversion: a float too
// large for int64 read as an integer was undefined behaviour (found by fuzz_checkpoint_index).
TEST(RunSettings, ASavedValueOfTheWrongKindIsAnError) {
  const nlohmann::json good = run_settings_json(a_run());
  for (const auto& [flag, bad] : std::vector<std::pair<std::string, nlohmann::json>>{
           {"keep-last", nlohmann::json::parse("184467440737095516150")},
           {"keep-last", 2.5},
           {"batch", "8"},
           {"lr", nullptr},
           {"bf16", 1},
           {"skip-batches", nlohmann::json::array({1, 2.5})},
           {"seed", -1}}) {
    nlohmann::json saved = good;
    saved[flag] = bad;
    RunSettings s;
    try {
      apply_saved_settings(saved, {}, s);
      ADD_FAILURE() << flag << " = " << bad.dump() << " was taken";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'" + flag + "'"), std::string::npos) << e.what();
    }
  }
  RunSettings s;
  nlohmann::json big_seed = good;
  big_seed["seed"] = uint64_t(18446744073709551615ull);
  EXPECT_NO_THROW(apply_saved_settings(big_seed, {}, s));
  EXPECT_EQ(s.train.seed, 18446744073709551615ull);
}

TEST(RunSettings, ACheckpointWithoutASettingLeavesItAlone) {
  nlohmann::json saved = run_settings_json(a_run());
  saved.erase("recompute-layers");
  RunSettings resumed;
  resumed.train.compute.recompute_layers = 7;
  apply_saved_settings(saved, {}, resumed);
  EXPECT_EQ(resumed.train.compute.recompute_layers, 7);
  EXPECT_EQ(resumed.train.batch, 16);
}

TEST(RunSettings, AWronglyTypedSettingIsAnError) {
  nlohmann::json saved = run_settings_json(a_run());
  saved["batch"] = "sixteen";
  RunSettings resumed;
  try {
    apply_saved_settings(saved, {}, resumed);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'batch'"), std::string::npos) << e.what();
  }
}

TEST(CheckpointRoot, RootOrParentOfAStepDirectory) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("tp_ckroot_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "step-4");
  std::ofstream(root / "step-4" / "index.json") << "{}";
  EXPECT_EQ(checkpoint_root(root.string()), root.string());  // no latest yet: a root to be
  std::ofstream(root / "latest") << "step-4\n";
  EXPECT_EQ(checkpoint_root(root.string()), root.string());
  EXPECT_EQ(fs::path(checkpoint_root((root / "step-4").string())), root);
  EXPECT_EQ(fs::path(checkpoint_root((root / "step-4").string() + "/")), root);
  EXPECT_EQ(latest_checkpoint_step((root / "none").string()), -1);
  fs::remove_all(root);
}

}  // namespace
}  // namespace tensorpar::testing

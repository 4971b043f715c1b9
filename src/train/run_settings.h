// The settings that define a training run (batch, micro-batch, sequence length, bf16,
// recomputation, schedule, data and its seed, ...), recorded in every checkpoint under "run" so
// that `train --resume` continues the same run: a setting comes from the checkpoint unless its
// flag is given again, and every flag that changes one is reported.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "train/trainer.h"

namespace tensorpar {

struct RunSettings {
  TrainOptions train;           // out_dir and extra_state are not settings of the run
  std::string data;             // text file or directory
  double val_fraction = 0.05;   // last fraction of the tokens held out
  int64_t max_data_tokens = 0;  // 0: all
};

// The settings as JSON, keyed by their command-line flag without "--" ("batch", "micro-batch",
// "bf16", ...).
nlohmann::json run_settings_json(const RunSettings& s);

// Takes every setting `saved` (run_settings_json of the checkpoint's run) holds into s, except
// those whose flag is in `given` (flags typed on the command line, without "--"), which keep s's
// value. Returns "--batch 16 -> 8, --bf16 true -> false" for the given flags whose value differs
// from the checkpoint's ("" when none).
std::string apply_saved_settings(const nlohmann::json& saved, const std::set<std::string>& given,
                                 RunSettings& s);

}  // namespace tensorpar

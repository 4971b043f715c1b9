// Saving and loading one TP group's training state as a sharded checkpoint (io/sharded_checkpoint):
// every rank writes its parameter slices and AdamW moments ("param/", "exp_avg/", "exp_avg_sq/"
// + HF name; Replicated tensors by rank 0 only), rank 0 writes the index with the trainer state,
// and the directory is published atomically as <root>/step-<N>. Loading reads each rank's new
// slices from whichever files overlap them, so the TP size may differ from the saving run's.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "model/causal_lm.h"
#include "train/optimizer.h"

namespace tensorpar {

// Test hook simulating a crash during a save: 1 = rank 0 throws after every rank's shard file is
// written (before the index), 2 = after the index (before the directory is published).
struct SaveFault {
  int fail_at = 0;
};

// Collective over tp (and pp: a pipeline's stages, each with its own parameters, write one file
// per (pp, tp) rank; loading finds tensors by name, so any other tp x pp reads them). Writes
// <root>/step-<step> (via <root>/.tmp-step-<step>) and points <root>/latest at it. `state`
// (JSON) is stored in the index under "state" with "step", "optimizer_steps", "tp" and "pp" added.
// ep (expert parallelism over data-parallel ranks): the EP group, collective over it too; each EP
// rank writes its experts (ParamShard::expert), EP rank 0 everything else.
void save_checkpoint(const std::string& root, int64_t step, const std::vector<ParamShard>& params,
                     AdamW& opt, Communicator& tp, nlohmann::json state,
                     const SaveFault& fault = {}, Communicator* pp = nullptr, Communicator* ep = nullptr);

// Reads this rank's slice of every parameter (and, with opt, its moments and step count) from
// the checkpoint `path` names (a step directory, or a root with `latest`). Returns the state.
// Throws Error naming the tensor when a parameter is missing or its global shape differs.
nlohmann::json load_checkpoint(const std::string& path, const std::vector<ParamShard>& params,
                               AdamW* opt);

// A checkpoint's trainer state (its index's "state") as resume and export read it: "step",
// "optimizer_steps", "tp" and "pp" integers >= 0, "seed" an integer, "tokenizer" and "data"
// strings, "schedule" an object whose lr, min_lr, warmup and steps are numbers, "run" an object,
// each when present ("config" is read by stored_model_config). Throws Error naming `where` and
// the key. Returns state.
const nlohmann::json& check_checkpoint_state(const nlohmann::json& state, const std::string& where);

// The checked state of the checkpoint `path` names (a step directory, or a root with `latest`).
nlohmann::json read_checkpoint_state(const std::string& path);

// The root directory a checkpoint path belongs to, where a run that continues it saves: the path
// itself when it is a root (it has `latest`, or no index.json), the parent of a step directory.
std::string checkpoint_root(const std::string& path);

// The step of the checkpoint `root/latest` names; -1 when root has no `latest`.
int64_t latest_checkpoint_step(const std::string& root);

}  // namespace tensorpar

// `--tp auto` (and, for train, `--pp auto` / `--dp auto`): the planner (src/plan, docs/planner.md)
// picks the sizes left open for the ranks this command gets, among the plans tensorpar can run,
// and the command says which plan it took and why the runner-up lost.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <map>
#include <string>

#include "cli/commands.h"
#include "model/model_config.h"
#include "plan/model_spec.h"

namespace tensorpar::cli {

inline constexpr int kAutoSize = 0;  // a size flag given as "auto"

// A size option that takes an integer in [1, max] or "auto" (stored as kAutoSize).
CLI::Option* accept_auto(CLI::Option* opt, int max);

// The ranks a command may use when a size is auto: the MPI world under a launcher, else this
// process's cores (its CPU affinity) over --threads-per-rank. `source` says which.
int auto_world_size(const CommonOptions& common, std::string* source);

// The planner's view of a model config (sizes, MLP kind, experts).
plan::ModelSpec model_spec_from_config(const ModelConfig& c, const std::string& name);

// How a model's weights sit in memory for inference: bytes per parameter and each format's share
// of the bytes ("q4_1", "bf16", ...; plan::ServeWorkload::weight_format_shares).
// `dtype` is --dtype (auto keeps the file's types, f32 widens 16-bit and block weights are kept).
struct WeightFormat {
  double bytes_per_parameter = 2;
  std::map<std::string, double> shares = {{"bf16", 1.0}};
};
WeightFormat weight_format_of(const std::string& model_path, const std::string& dtype,
                              const plan::ModelSpec& m);

// Inference (generate, chat, perplexity, serve, inspect): the TP size for `model_path` when
// common.tp is auto, else common.tp. Prints the choice on stderr under `command`.
int resolve_inference_tp(const CommonOptions& common, const ModelConfig& config,
                         const std::string& model_path, const std::string& dtype,
                         const char* command);

// Training: the sizes given (kAutoSize where auto) and the run's shape.
struct TrainSizeRequest {
  int tp = 1, pp = 1, dp = 1, ep = 1;
  int64_t batch = 8, seq = 256;
  int64_t micro_batch = 0;       // 0: the planner picks it too
  int64_t recompute_layers = 0;  // 0: none; >= layers: full (pinned, not chosen)
  bool pipeline_allowed = true;  // false: fine-tuning --model or --ep > 1 keep pp at 1
  int zero = 0;                  // --zero: the distributed optimizer (priced when dp > 1)
  bool sequence_parallel = false;  // --sequence-parallel (priced as given)
  bool dp_buckets = true;          // --dp-bucket-mb > 0: the dp reduction overlaps backward
  int interleave = 1;              // --pp-virtual: model chunks per pipeline stage
};
struct TrainSizes {
  int tp = 1, pp = 1, dp = 1;
  int64_t micro_batch = 0;
};
// Resolves every auto size with the planner (a no-op when none is auto); prints the chosen plan,
// its predicted throughput and memory, and why the next runnable plan is slower.
TrainSizes resolve_train_sizes(const CommonOptions& common, const ModelConfig& config,
                               const TrainSizeRequest& req);

}  // namespace tensorpar::cli

// Subcommands of the tensorpar binary. Each adds itself to the app with its options and a
// callback; the logic lives in the library (cli/ stays thin).
#pragma once

#include <CLI/CLI.hpp>

#include "infer/generate.h"

namespace tensorpar::cli {

// Options every subcommand that runs ranks shares.
struct CommonOptions {
  std::string backend = "threads";
  int tp = 1;  // 0 (kAutoSize in cli/auto_plan.h): --tp auto
  int ep = 1;
  std::string cluster = "this-machine";  // what --tp auto plans for
  int threads_per_rank = 0;
  bool json = false;
};
void add_common_options(CLI::App& cmd, CommonOptions& opts);

// -n/--max-tokens, --temperature, --top-k, --top-p, --min-p, --seed, --stop (generate and chat).
void add_sampling_options(CLI::App& cmd, GenerateOptions& gen);
// One warning line on stderr when sampling flags were given that greedy decoding ignores.
void warn_inert_sampling(const CLI::App& cmd, const GenerateOptions& gen, const char* command);

void add_bench_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_perplexity_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_plan_command(CLI::App& app);

}  // namespace tensorpar::cli

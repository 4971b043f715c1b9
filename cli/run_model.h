// What generate, chat and perplexity share: options for loading a model, starting the ranks,
// and the per-rank memory report.
#pragma once

#include <functional>
#include <string>

#include "cli/commands.h"
#include "comm/launch.h"
#include "model/causal_lm.h"

namespace tensorpar::cli {

struct ModelOptions {
  std::string model;         // GGUF file or HF directory
  std::string dtype = "f32";  // float weights in memory: f32 | bf16
  int64_t ctx = 0;           // context length (0: the model's, capped at 4096)
  std::string tokenizer;     // tokenizer (+ chat template) source; "" = the model's
};
void add_model_options(CLI::App& cmd, ModelOptions& opts);
// Where the tokenizer and chat template come from: --tokenizer, else --model.
inline const std::string& tokenizer_source(const ModelOptions& opts) {
  return opts.tokenizer.empty() ? opts.model : opts.tokenizer;
}

// Starts the ranks (threads or MPI), loads the model on each with the world as its TP group,
// and runs fn(model) on every rank.
void run_with_model(const CommonOptions& common, const ModelOptions& mopts,
                    const std::function<void(CausalLM& model)>& fn);
// The context length to allocate for this model.
int64_t context_length(const ModelOptions& mopts, const CausalLM& model);
// Bytes this rank holds for the model (weights + cache), gathered: element r is rank r's, in MiB.
std::vector<double> memory_per_rank_mb(CausalLM& model, const KvCache& cache);

}  // namespace tensorpar::cli

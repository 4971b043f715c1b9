// What generate, chat, perplexity and serve share: options for loading a model, the checks made
// before any rank starts (a model path that is a model, a tokenizer, the launcher), starting the
// ranks, and the per-rank memory report.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "comm/launch.h"
#include "model/causal_lm.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar::cli {

struct ModelOptions {
  std::string model;          // GGUF file or HF directory
  std::string dtype = "auto";  // float weights in memory: auto | f32 | bf16
  int64_t ctx = 0;            // context length (0: the model's, capped at 4096)
  std::string tokenizer;      // tokenizer (+ chat template) source; "" = the model's
  std::string activations = "int8";  // quantized weights multiply: int8 | f32 activations
  std::string kv_dtype = "f32";      // KV cache elements: f32 | f16
  bool tp_invariant = false;         // logits bitwise the same at every --tp (LoadOptions)
  int pp = 1;                        // pipeline stages (the world is tp x pp ranks)
  std::vector<int64_t> pp_layers;    // layers per stage (empty: even)
  int64_t pp_micro_rows = 64;        // rows per micro-batch through the stages (0: never cut)
};
void add_model_options(CLI::App& cmd, ModelOptions& opts);
// Where the tokenizer and chat template come from: --tokenizer, else --model.
inline const std::string& tokenizer_source(const ModelOptions& opts) {
  return opts.tokenizer.empty() ? opts.model : opts.tokenizer;
}

// Throws Error naming the fix when --model (or --tokenizer) cannot be what it should: a missing
// path, a training checkpoint (export it first), a directory without config.json, a model
// directory without tokenizer.json (pass --tokenizer). `command` names the subcommand.
void check_model_paths(const ModelOptions& opts, const char* command, bool needs_tokenizer);

// Throws Error when tp ranks cannot split this model (more ranks than attention heads).
void check_tp_size(int tp, const ModelConfig& config, const char* command);

// Starts the ranks (threads or MPI), loads the model on each with the world as its TP group,
// and runs fn(model) on every rank. Checks the launch first (launch_checks.h).
void run_with_model(const char* command, const CommonOptions& common, const ModelOptions& mopts,
                    const std::function<void(CausalLM& model)>& fn);
// The context length to allocate for this model; throws when --ctx exceeds its positions.
int64_t context_length(const ModelOptions& mopts, const CausalLM& model);
// The chat template of the tokenizer source; a model without one gets ChatML, and the first call
// for such a model says so on stderr.
ChatTemplate chat_template_or_chatml(const ModelOptions& opts, const Tokenizer& tok,
                                     const char* command);
// Bytes this rank holds for the model (weights + cache), gathered: element r is rank r's, in MiB.
std::vector<double> weights_kv_mb_per_rank(CausalLM& model, const KvCache& cache);
// This process's peak resident set so far, in MiB (all threads-backend ranks together).
double process_peak_rss_mb();

}  // namespace tensorpar::cli

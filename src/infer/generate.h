// The generation loop: batched prefill of the prompt, then token-by-token decode with the KV
// cache, sampling over vocab-sharded logits, stopping on end-of-sequence tokens, stop strings
// or a token budget. Collective over the model's TP group: every rank runs it; the tokenizer
// lives on rank 0, which decides when to stop and streams the text.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infer/sampler.h"
#include "model/causal_lm.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar {

struct GenerateOptions {
  int64_t max_tokens = 128;
  SamplingParams sampling;
  std::vector<std::string> stop;  // stop strings, checked on the decoded text (rank 0)
  bool stop_on_eos = true;
};

struct GenerateResult {
  std::vector<int32_t> tokens;  // generated ids (the stopping EOS token excluded)
  std::string text;             // their text, cut before a stop string (rank 0 only)
  std::string stop_reason;      // "eos", "stop", "length", "context"
  int64_t prompt_tokens = 0;
  double prefill_s = 0;         // prompt forward + first sample
  double decode_s = 0;          // every later token
  int64_t decode_steps = 0;     // forwards after the prefill (decode tok/s = steps / decode_s)
  double ttft_s = 0;            // time to the first generated token
};

// Runs the prompt (ids already broadcast: every rank passes the same) and generates after the
// tokens already in `cache` (multi-turn chat keeps its cache). `tokenizer` and `on_text` are
// used on rank 0 only (may be null elsewhere); on_text receives the text as it becomes final.
GenerateResult generate(CausalLM& model, KvCache& cache, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const Tokenizer* tokenizer,
                        const std::function<void(std::string_view)>& on_text);

// Rank 0's ids reach every rank of tp (the count first, then the ids).
std::vector<int32_t> broadcast_ids(std::vector<int32_t> ids, Communicator& tp);

}  // namespace tensorpar

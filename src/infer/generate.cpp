// Prefill, then decode: one forward per token over the KV cache. Rank 0 (of model.control())
// alone holds the text:
// after each sampled token (identical on every rank) it checks EOS and stop strings and
// broadcasts a single continue/stop flag, so the ranks leave the loop together.
#include "infer/generate.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "core/error.h"
#include "infer/batch_sampler.h"
#include "infer/sequence_sampler.h"
#include "infer/stop_matcher.h"

namespace tensorpar {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

std::vector<int32_t> broadcast_ids(std::vector<int32_t> ids, Communicator& tp) {
  int64_t n = int64_t(ids.size());
  tp.broadcast(&n, 1, DType::kI64, 0);
  ids.resize(static_cast<size_t>(n));
  if (n > 0) tp.broadcast(ids.data(), n, DType::kI32, 0);
  return ids;
}

GenerateResult generate(CausalLM& model, KvCache& cache, std::span<const int32_t> prompt,
                        const GenerateOptions& options, const Tokenizer* tokenizer,
                        const std::function<void(std::string_view)>& on_text) {
  Communicator& tp = model.tp();
  Communicator& control = model.control();
  const bool leader = control.rank() == 0;
  TP_CHECK(!leader || tokenizer, "[generate] rank 0 needs the tokenizer");
  TP_CHECK(!prompt.empty(), "[generate] empty prompt");
  const int64_t V = model.config().vocab_size;
  for (int32_t id : prompt)
    TP_CHECK(id >= 0 && id < V, "[generate] prompt token id ", id, " outside the vocabulary [0, ", V, ")");
  TP_CHECK(cache.length() + int64_t(prompt.size()) <= cache.capacity(), "[generate] prompt of ",
           prompt.size(), " tokens does not fit the context (", cache.capacity() - cache.length(), " left)");

  GenerateResult r;
  r.prompt_tokens = int64_t(prompt.size());
  SamplingParams sampling = options.sampling;
  if (sampling.top_k >= V) sampling.top_k = 0;  // keeps every token: off (no top-k buffers)
  SequenceSampler sampler(sampling, prompt);
  const Range vocab = model.vocab_range();
  Tensor logits = Tensor::empty({1, vocab.size()}, DType::kF32);
  std::optional<StreamDecoder> decoder;
  if (leader) decoder.emplace(*tokenizer);
  StopMatcher matcher(options.stop);
  auto emit = [&](const std::string& s) {
    if (!s.empty() && on_text) on_text(s);
  };

  const auto t0 = Clock::now();
  model.forward(logits, prompt, cache, /*last_only=*/true);
  r.stop_reason = "length";
  Clock::time_point t_first;
  for (int64_t step = 0; step < options.max_tokens; ++step) {
    const RowSampling row = sampler.next_row();
    const int32_t token = sample_batch(logits, vocab, std::span(&row, 1), tp)[0].token;
    sampler.accept(token);
    if (step == 0) {
      t_first = Clock::now();
      r.ttft_s = r.prefill_s = seconds_since(t0);
    }
    // Rank 0 decides: 0 continue, 1 eos, 2 stop string.
    int32_t verdict = 0;
    if (leader) {
      if (options.stop_on_eos && tokenizer->is_eos(token)) {
        verdict = 1;
      } else {
        r.tokens.push_back(token);
        bool stopped = false;
        emit(matcher.push(decoder->push(token), stopped));
        if (stopped) verdict = 2;
      }
    }
    control.broadcast(&verdict, 1, DType::kI32, 0);
    if (!leader && verdict != 1) r.tokens.push_back(token);
    if (verdict != 0) {
      r.stop_reason = verdict == 1 ? "eos" : "stop";
      break;
    }
    if (step + 1 == options.max_tokens) break;
    if (cache.length() >= cache.capacity()) {
      r.stop_reason = "context";
      break;
    }
    const int32_t next[1] = {token};
    model.forward(logits, next, cache, /*last_only=*/true);
    ++r.decode_steps;
  }
  if (leader && r.stop_reason != "stop") {
    bool stopped = false;
    emit(matcher.push(decoder->flush(), stopped));
    if (!stopped) emit(matcher.finish());
  }
  if (!r.tokens.empty()) r.decode_s = std::chrono::duration<double>(Clock::now() - t_first).count();
  if (leader) r.text = matcher.text();
  return r;
}

}  // namespace tensorpar

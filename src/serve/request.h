// A generation request as the engine sees it, and the stream of chunks it sends back. The HTTP
// side (rank 0 only) turns OpenAI JSON into a GenerationParams + prompt ids, submits them to the
// Engine, and reads StreamChunks from the RequestHandle until one is `finished`.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "infer/sampler.h"

namespace tensorpar {

struct GenerationParams {
  int64_t max_tokens = 16;
  SamplingParams sampling;       // temperature (0 = greedy), filters, penalties, seed
  int top_logprobs = -1;         // -1: no logprobs; 0..20: the chosen token's + this many top
  std::vector<std::string> stop; // stop strings (the text is cut before the first one)
  bool ignore_eos = false;
};

// The log-probability (log-softmax of the raw logits, before penalties and temperature) of a
// generated token, and the most likely alternatives at that step.
struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // (token, logprob), most likely first
};

// What the engine sends back. Text is final (held back while it might begin a stop string or an
// unfinished UTF-8 character); `logprobs` has one entry per token behind this chunk when asked.
struct StreamChunk {
  std::string text;
  std::vector<int32_t> tokens;
  std::vector<TokenLogprob> logprobs;
  bool finished = false;
  std::string finish_reason;  // when finished: "stop" | "length" | "abort" | "error"
  std::string error;          // when finish_reason == "error": why (e.g. a rank failed)
  int64_t prompt_tokens = 0;  // usage, filled on the finished chunk
  int64_t completion_tokens = 0;
  int64_t cached_prompt_tokens = 0;  // prompt tokens served from the prefix cache
};

// Shared by the HTTP thread that waits for chunks and the engine that produces them.
class RequestHandle {
 public:
  explicit RequestHandle(int64_t id) : id_(id) {}
  int64_t id() const { return id_; }

  // HTTP side: the next chunk, or nullopt after `timeout` without one.
  std::optional<StreamChunk> next(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    if (!cv_.wait_for(lock, timeout, [&] { return !chunks_.empty(); })) return std::nullopt;
    StreamChunk c = std::move(chunks_.front());
    chunks_.pop_front();
    return c;
  }
  // HTTP side: the client went away; the engine aborts the request and frees its blocks at its
  // next step.
  void cancel() {
    std::lock_guard lock(mu_);
    cancelled_ = true;
  }

  // Engine side.
  bool cancelled() const {
    std::lock_guard lock(mu_);
    return cancelled_;
  }
  void push(StreamChunk chunk) {
    {
      std::lock_guard lock(mu_);
      chunks_.push_back(std::move(chunk));
    }
    cv_.notify_all();
  }

 private:
  const int64_t id_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<StreamChunk> chunks_;
  bool cancelled_ = false;
};

}  // namespace tensorpar

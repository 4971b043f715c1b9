// The serving engine: continuous batching over the tensor-parallel ranks. Every rank runs
// Engine::run(); on rank 0 it also runs the scheduler, which each step broadcasts one step plan
// (the rows to run, block tables, sampling draws, finished sequences) to the TP group. Only rank 0
// takes requests (submit) and knows HTTP exists; the other ranks only compute.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "model/causal_lm.h"
#include "serve/metrics.h"
#include "serve/request.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar {

struct EngineOptions {
  int64_t max_seqs = 16;           // running sequences at most (decode rows per step)
  int64_t kv_cache_mb = 0;         // per-rank KV pool; 0: enough for max_seqs full contexts, capped
  int64_t ctx = 0;                 // context per sequence (prompt + generated); 0: model's, <= 4096
  int64_t max_batch_tokens = 256;  // rows per step (decode rows + prefill chunks)
  int64_t max_queue = 256;         // waiting requests beyond which submit refuses (429)
  int64_t block_size = 16;         // tokens per KV block
  bool prefix_caching = true;
  double idle_heartbeat_s = 0.5;   // an idle scheduler still broadcasts this often (no timeouts)
};

// Thrown by submit: the HTTP side maps `status` to its response (400, 429, 503).
struct SubmitError : std::runtime_error {
  SubmitError(int status, const std::string& msg) : std::runtime_error(msg), status(status) {}
  int status;
};

class Engine {
 public:
  // model: this rank's shard; tokenizer: rank 0 only (null elsewhere).
  Engine(CausalLM& model, const Tokenizer* tokenizer, const EngineOptions& options);
  ~Engine();

  // Every rank: runs steps until stop() (rank 0) and the running requests are done or the grace
  // period ends; then every rank returns. Throws (on every rank) when a collective fails.
  void run();

  // Rank 0, any thread. Throws SubmitError: 400 prompt + max_tokens over the context (naming
  // both numbers) or an empty prompt, 429 queue full, 503 draining or stopped.
  std::shared_ptr<RequestHandle> submit(std::vector<int32_t> prompt, const GenerationParams& params);
  // Rank 0, any thread: refuse new requests, let running ones finish for up to grace_s, then end
  // run() on every rank.
  void stop(double grace_s);
  // Rank 0: true once run() has started and until stop()/failure.
  bool ready() const { return state_.load() == State::kRunning; }
  // Rank 0: the context per sequence (prompt + max_tokens must fit).
  int64_t context_length() const { return ctx_; }
  ServeMetrics& metrics() { return *metrics_; }

  enum class State : int { kStarting, kRunning, kDraining, kStopped, kFailed };
  State state() const { return state_.load(); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<State> state_{State::kStarting};
  int64_t ctx_ = 0;
  std::unique_ptr<ServeMetrics> metrics_;
};

}  // namespace tensorpar

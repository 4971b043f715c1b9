// The continuous-batching scheduler (rank 0): which sequences run in the next engine step and
// with which rows. Every step: one decode row per running sequence, then prefill chunks of
// running and newly admitted prompts under a token budget (chunked prefill, so a long prompt
// holds the others up for one chunk at most). KV blocks come from a BlockManager with prefix
// caching; when a decode row finds no free block, the youngest running sequence is preempted
// (its blocks freed, recomputed later from its tokens) and nothing fails.
#pragma once

#include <cstdint>
#include <limits>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "infer/batch_sampler.h"
#include "infer/sequence_sampler.h"
#include "infer/step_plan.h"
#include "serve/block_manager.h"
#include "serve/request.h"

namespace tensorpar {

struct SchedulerOptions {
  int64_t max_seqs = 16;           // running sequences at most
  int64_t max_batch_tokens = 256;  // rows per step (>= max_seqs)
  int64_t block_size = 16;
  int64_t n_blocks = 0;            // KV blocks in the pool
  bool prefix_caching = true;
};

// One request as the scheduler tracks it.
struct Sequence {
  int64_t id = 0;
  std::vector<int32_t> tokens;  // prompt + generated; positions [0, computed) are in the KV cache
  int64_t n_prompt = 0;
  int64_t computed = 0;
  std::vector<int32_t> blocks;  // block table
  int64_t committed = 0;        // leading full blocks registered in the prefix cache
  GenerationParams params;
  std::optional<SequenceSampler> sampler;  // this request's draws and penalty history
  bool admitted = false;        // has run at least once (queue time measured)
  int64_t cached_prompt_tokens = 0;   // found in the prefix cache at first admission
  int64_t preemptions = 0;
  int64_t generated() const { return int64_t(tokens.size()) - n_prompt; }
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerOptions& options);

  // Queues a sequence (FIFO).
  void add(std::unique_ptr<Sequence> seq);
  // The next step; kIdle with no sequences when nothing can run. prefill_cap: prompt rows at
  // most in a step that also has decode rows (keeps those streams' inter-token latency down;
  // a step without decode rows may fill max_batch_tokens).
  StepPlan plan(int64_t prefill_cap = std::numeric_limits<int64_t>::max());
  // After the step ran: advances the sequences of `plan`, appends their sampled tokens, and
  // registers newly full blocks in the prefix cache. Returns the sequences that got a token,
  // with it, in plan order.
  std::vector<std::pair<Sequence*, const RowSample*>> apply(const StepPlan& plan, std::span<const RowSample> samples);
  // Removes a sequence (finished, cancelled or aborted) and frees its blocks.
  void finish(int64_t id);

  Sequence* find(int64_t id);
  std::vector<int64_t> ids() const;  // every sequence, running then waiting
  int64_t running() const { return int64_t(running_.size()); }
  int64_t waiting() const { return int64_t(waiting_.size()); }
  int64_t preemptions() const { return preemptions_; }
  // Prefix-cache use over admitted sequences: prompt tokens looked up, and found.
  int64_t prefix_query_tokens() const { return prefix_query_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_; }
  const BlockManager& blocks() const { return blocks_; }
  const SchedulerOptions& options() const { return options_; }

 private:
  // Gives `s` blocks up to `tokens` positions; false when the pool runs out (what it got stays).
  bool grow(Sequence& s, int64_t tokens);
  void free_blocks(Sequence& s);
  // Frees the youngest running sequence other than `keep` and queues it first; false if none.
  bool preempt_youngest(const Sequence* keep);
  StepSeq row(Sequence& s, int64_t n);

  SchedulerOptions options_;
  BlockManager blocks_;
  std::map<int64_t, std::unique_ptr<Sequence>> seqs_;
  std::vector<Sequence*> running_;  // in arrival (id) order
  std::deque<Sequence*> waiting_;
  int64_t preemptions_ = 0;
  int64_t prefix_query_ = 0, prefix_hit_ = 0;
};

}  // namespace tensorpar

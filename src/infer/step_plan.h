// One engine step of continuous batching as every rank of a TP group runs it: the scheduler on
// rank 0 writes a StepPlan (which sequences run which tokens at which positions over which KV
// blocks, and how their next tokens are drawn), broadcasts it, and every rank runs the same
// batched forward and batched sampling. Ranks other than 0 keep no request state: the plan says
// everything, so their block tables can never drift from rank 0's.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "infer/batch_sampler.h"
#include "model/causal_lm.h"

namespace tensorpar {

struct StepSeq {
  int64_t id = 0;                // the request (for errors)
  int64_t pos0 = 0;              // position of tokens[0]
  std::vector<int32_t> tokens;   // the rows this sequence runs in this step
  std::vector<int32_t> blocks;   // its block table, covering positions [0, pos0 + tokens.size())
  bool sample = false;           // its last row's logits are sampled (end of prompt, or decode)
  RowSampling sampling;          // when sample
};

struct StepPlan {
  enum class Kind : int64_t { kRun = 1, kIdle = 2, kStop = 3 };
  Kind kind = Kind::kIdle;
  std::vector<StepSeq> seqs;
};

// Flat i64 encoding (floats and doubles as their bits) and back; decode checks every count.
std::vector<int64_t> encode_plan(const StepPlan& plan);
StepPlan decode_plan(const std::vector<int64_t>& words);
// Rank `root`'s plan reaches every rank of tp (length, then the words); others pass anything.
StepPlan broadcast_plan(const StepPlan& plan, Communicator& tp, int root = 0);

// Runs plans on one rank: one forward_batch over every sequence's rows, then one sample_batch
// over the sampled rows. Keeps its logits buffer across steps.
class StepRunner {
 public:
  StepRunner(CausalLM& model, KvPool& pool) : model_(model), pool_(pool) {}
  // The samples of the plan's sampling sequences, in plan order. Collective over model.tp().
  std::vector<RowSample> run(const StepPlan& plan);

 private:
  CausalLM& model_;
  KvPool& pool_;
  Tensor logits_;
  std::vector<SeqChunk> chunks_;
  std::vector<RowSampling> rows_;
};

}  // namespace tensorpar

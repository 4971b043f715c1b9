// Training incident response: what a step's loss and gradient norm must look like for the
// optimizer to take it, and which data batches a run skips.
//
// A step diverges when its loss or its global gradient norm is not finite, or (with a spike
// factor) when its loss exceeds factor x the mean loss of the last accepted steps. The trainer
// checks before the optimizer step, so a diverged step never changes the weights; then it either
// stops with a message (the default) or rolls back to the last checkpoint and skips the batch
// (--on-divergence rollback; docs/reliability.md).
//
// Batches are numbered from 1 like steps: batch b is the one step b trains on in a run that skips
// nothing. A run that skips batches takes, at each step, the next batch not skipped, so a run
// rolled back past batch b and one told to skip b from the start see the same data.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace tensorpar {

struct DivergencePolicy {
  bool rollback = false;     // false: stop with an error naming the step and the batch
  double spike_factor = 0;   // > 1: a loss above factor x the running mean diverges (0: off)
  int64_t spike_window = 20;  // accepted steps in the running mean (needs 3 before it judges)
  int64_t max_rollbacks = 3;  // one more incident than this stops the run
};

// Validates a policy; throws Error naming the bad field.
void check_divergence_policy(const DivergencePolicy& p);

// A test-only fault: the batch with this number is poisoned (TENSORPAR_POISON_BATCH, see
// parse_poisoned_batch). nan: its gradients are scaled by NaN (an overflow in backward);
// spike: its targets are all the vocabulary's last token (a corrupt shard of data).
struct PoisonedBatch {
  int64_t batch = 0;  // 0: none
  enum class Kind : uint8_t { kNan, kSpike } kind = Kind::kNan;
};

// "batch:7,kind:nan" | "batch:7,kind:spike"; throws Error naming the bad part.
PoisonedBatch parse_poisoned_batch(const std::string& spec);

// The batch number (1-based) that 0-based step index `step_index` trains on, given the sorted
// batch numbers a run skips.
int64_t batch_for_step(int64_t step_index, const std::vector<int64_t>& skipped);

// Sorted, duplicate-free union; throws Error for a batch number below 1.
std::vector<int64_t> merge_skipped(std::vector<int64_t> a, const std::vector<int64_t>& b);

// The running mean of accepted losses and the verdict on a new step.
class DivergenceMonitor {
 public:
  explicit DivergenceMonitor(const DivergencePolicy& p) : p_(p) {}
  // Why a step with this loss and gradient norm diverges ("non-finite loss nan", ...), or nullopt.
  std::optional<std::string> verdict(float loss, double grad_norm) const;
  // Records the loss of a step the optimizer took.
  void accept(float loss);
  // The mean of the recorded losses (NaN when none).
  double running_mean() const;
  // The window, kept in checkpoints so a resumed or rolled-back run judges as the original did.
  nlohmann::json to_json() const;
  void from_json(const nlohmann::json& j);

 private:
  DivergencePolicy p_;
  std::vector<float> window_;  // the last spike_window accepted losses, oldest first
};

}  // namespace tensorpar

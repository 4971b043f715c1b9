// AdamW over one rank's parameter shards (f32 master weights, moments m and v per shard), the
// warmup + cosine learning-rate schedule, and global gradient-norm clipping over the TP group.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "kernels/cpu/adamw.h"
#include "model/causal_lm.h"

namespace tensorpar {

// Moments of one shard, the same shape as its value.
struct AdamWState {
  Tensor exp_avg, exp_avg_sq;
};

class AdamW {
 public:
  explicit AdamW(const AdamWConfig& config) : config_(config) {}

  // One step at learning rate lr over every shard with a gradient (decoupled weight decay on
  // all of them, as the PyTorch reference's single param group). Moments start at zero.
  // Replicated shards get identical updates on every rank (same grads, same arithmetic).
  void step(const std::vector<ParamShard>& params, float lr);

  int64_t steps() const { return steps_; }
  void set_steps(int64_t t) { steps_ = t; }
  const AdamWConfig& config() const { return config_; }
  // Moments by parameter name (created zero-filled for p when absent).
  AdamWState& state(const ParamShard& p);
  bool has_state(const std::string& name) const { return state_.count(name) > 0; }
  // Drops every moment (DistributedAdamW keeps its own chunk of them).
  void clear_state() { state_.clear(); }

 private:
  AdamWConfig config_;
  int64_t steps_ = 0;
  std::map<std::string, AdamWState> state_;
};

// Learning rate at step (0-based): linear warmup from lr/warmup to lr over `warmup` steps, then
// cosine decay to min_lr at total_steps (constant lr when total_steps <= warmup).
float lr_at(int64_t step, float lr, int64_t warmup, int64_t total_steps, float min_lr);

// The global L2 norm of every gradient across the TP group: each shard's sum of squares is
// weighted 1 / copies (Replicated shards and kv shards held by several ranks count once), the
// per-rank sums are gathered and added in rank order (identical on every rank). With pp (a
// pipeline group), the stages' sums are then gathered and added in stage order: the norm of the
// whole model. Collective over tp (and pp).
// ep: the EP group when experts are spread over data-parallel ranks (ParamShard::expert).
double global_grad_norm(const std::vector<ParamShard>& params, Communicator& tp, Communicator* pp = nullptr,
                        Communicator* ep = nullptr);

// The norm from this rank's sums of squares (local[0]: shards every EP rank holds alike,
// local[1]: experts), combined over tp (and ep, pp) as global_grad_norm does.
double combine_grad_norm(const double local[2], Communicator& tp, Communicator* pp = nullptr,
                         Communicator* ep = nullptr);

// Scales every gradient by max_norm / norm when norm > max_norm; returns the norm before. A
// non-finite norm is returned as it is, the gradients untouched: the trainer judges the step
// (train/divergence.h).
double clip_grad_norm(const std::vector<ParamShard>& params, Communicator& tp, double max_norm,
                      Communicator* pp = nullptr, Communicator* ep = nullptr);

}  // namespace tensorpar

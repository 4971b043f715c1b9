// The training loop: micro-batch gradient accumulation, global-norm clipping, AdamW with
// warmup + cosine LR, periodic validation and sharded checkpoints, exact resume. Every rank runs
// it (SPMD) on the same corpus; batches are drawn from (seed, step, micro-batch). With a data-
// parallel group (dp, ranks holding the same TP shard), DP rank r runs micro-batches r, r + dp,
// ... of each step and the gradients are summed over dp before clipping, so every replica takes
// the same optimizer step as one TP group running all micro-batches (up to summation order);
// DP rank 0's TP group writes the checkpoints. With a Pipeline (pipeline.h), this rank is one
// stage: its micro-batches run in the 1F1B order over the stages, the gradient norm is taken over
// tp x pp, and every stage logs the loss the last stage computed.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "comm/timed_communicator.h"
#include "model/causal_lm.h"
#include "train/checkpoint.h"
#include "train/checkpoint_retention.h"
#include "train/data.h"
#include "train/divergence.h"
#include "train/optimizer.h"
#include "train/distributed_optimizer.h"
#include "train/gradient_buckets.h"
#include "train/pipeline.h"

namespace tensorpar {

struct TrainOptions {
  int64_t steps = 100;      // total optimizer steps (the run ends at this step)
  int64_t batch = 8;        // sequences per optimizer step (over all DP ranks)
  int64_t micro_batch = 0;  // sequences per forward/backward (0: = batch / dp); micro_batch x dp
                            // must divide batch
  int64_t seq = 128;        // tokens per sequence
  float lr = 1e-3f, min_lr = 0.0f;
  int64_t warmup = 0;
  AdamWConfig adam{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};  // lr here is ignored (schedule gives it)
  double clip = 1.0;                                  // max global gradient norm (0: no clipping)
  uint64_t seed = 1234;                               // data windows
  int64_t eval_every = 0;                             // steps between validation losses (0: never)
  int64_t eval_batches = 4;                           // validation batches of micro_batch sequences
  int64_t save_every = 0;      // steps between checkpoints (0: only at the end when out_dir set)
  std::string out_dir;         // checkpoint root ("" = no checkpoints)
  RetentionPolicy retention;   // older checkpoints removed after each save (default: none)
  nlohmann::json extra_state;  // stored in every checkpoint's state (e.g. the tokenizer path)
  TrainCompute compute;        // bf16 matmuls, activation recomputation (see causal_lm.h)
  DivergencePolicy divergence;  // stop (default) or roll back on a diverged step (divergence.h)
  std::vector<int64_t> skip_batches;  // batch numbers (from 1) this run never trains on
  PoisonedBatch poison;               // test-only: a batch made to diverge
  // ZeRO-1: AdamW moments sharded over the data-parallel group (distributed_optimizer.h); no
  // effect at dp 1. Numerically the replicated optimizer's step up to summation order.
  bool distributed_optimizer = false;
  // Data parallelism: gradients reduced in buckets of about this many bytes while backward goes
  // on (gradient_buckets.h; with the distributed optimizer, reduce-scattered in buckets of this
  // many bytes over the group); 0: every gradient reduced after backward.
  int64_t dp_bucket_bytes = 0;
};

// A diverged step (divergence.h): the optimizer did not take it.
struct Incident {
  int64_t batch = 0;        // the batch it trained on
  std::string reason;       // "non-finite gradient norm nan", "loss spike ...", ...
  double running_mean = 0;  // of the accepted losses before it (NaN when none)
  std::string rolled_back_to;  // the checkpoint the run continues from ("" when it stopped)
  std::vector<int64_t> skipped_batches;  // every batch the run skips from now on
};

// What a run did, for its summary (this process's run, from start or resume to the end).
struct RunTotals {
  int64_t optimizer_steps = 0;  // steps taken, including those replayed after a rollback
  int64_t incidents = 0, rollbacks = 0;
  int64_t checkpoints = 0;  // checkpoints this rank's group wrote
};

struct StepLog {
  int64_t step = 0;  // 1-based: the number of optimizer steps done
  float loss = 0;    // mean over the step's micro-batches
  float lr = 0;
  double grad_norm = 0;  // before clipping
  double ms = 0;
  double tokens_per_s = 0;
  std::optional<float> val_loss;
  // MoE models: per MoE layer, the top-k slots routed to each expert over the step's micro-batches
  // (this rank's tokens; empty for a dense model).
  std::vector<std::vector<double>> expert_load;
  int64_t activation_bytes = 0;  // this rank's (CausalLM::activation_bytes after the step)
  // Seconds of this step this rank spent in each timed group's collectives and point-to-point
  // calls (Trainer::time_groups), by group name; the rest of `ms` is compute and the rank's own
  // work. Time in a collective includes waiting for the slowest rank to reach it. With gradient
  // buckets the dp group's entry is this rank's waiting for them after backward, not their
  // reduction on the communication thread (dp_bucket_s).
  std::vector<std::pair<std::string, double>> comm_s;
  // Data parallelism: seconds this step spent on the gradients' reduction after backward returned
  // (the whole reduction without buckets; with them, waiting for the buckets still in flight).
  double dp_exposed_s = 0;
  // With buckets: seconds the communication threads spent reducing this step's buckets (hidden
  // behind backward but for dp_exposed_s), the step's buckets, and how many of them backward
  // launched before it returned.
  double dp_bucket_s = 0;
  int64_t dp_buckets = 0, dp_buckets_during_backward = 0;
  // Checkpoint directories this step's save made retention remove (world rank 0 only: the rank
  // that removes them).
  std::vector<std::string> removed_checkpoints;
  // Set when this step diverged: no optimizer step was taken; with --on-divergence rollback the
  // trainer is back at the checkpoint's step (step() says which) and `step` is the one that failed.
  std::optional<Incident> incident;
};

class Trainer {
 public:
  // dp: the data-parallel group of this rank (null: no data parallelism); pipeline: this rank's
  // stage (null: the model is whole); ep, edp: the expert-parallel and expert-data-parallel
  // groups when an MoE model's experts are spread over DP ranks (DeviceMesh). All outlive it.
  Trainer(CausalLM& model, const TokenCorpus& corpus, const TrainOptions& opt, Communicator* dp = nullptr,
          Pipeline* pipeline = nullptr, Communicator* ep = nullptr, Communicator* edp = nullptr);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Loads parameters, moments and the step from a checkpoint (any TP size). Collective. The
  // learning rate follows this run's options (--steps sets the cosine's length, so resuming with
  // the options of the interrupted run reproduces it exactly); returns a note naming the
  // schedule options that differ from the checkpoint's run ("" when they agree).
  std::string resume(const std::string& path);
  // Runs steps step()+1 .. opt.steps; on_step is called on every rank after each step, and after
  // each incident (StepLog::incident) that rolled the run back. With --on-divergence rollback and
  // no checkpoint in out_dir yet, it first saves one at this step to roll back to.
  void run(const std::function<void(const StepLog&)>& on_step);
  // One optimizer step (all micro-batches); returns its log (without val_loss). A diverged step
  // throws Error (policy stop) or rolls back (policy rollback) and returns the incident.
  StepLog train_step();
  // Time each step's collectives in these groups (name, timer), for StepLog::comm_s: e.g. "tp",
  // "pp" (the pipeline's sends and receives: transfer and waiting on the other stages), "dp"
  // (the gradient reduction after backward: all of it, or the wait for buckets in flight). The
  // dp group's timer must be the Communicator the trainer was given as dp.
  void time_groups(std::vector<std::pair<std::string, const TimedCommunicator*>> groups) {
    timed_groups_ = std::move(groups);
  }
  // Mean loss over the fixed validation batches.
  float evaluate();
  // Saves a checkpoint of this step, then applies the retention policy; returns the directories
  // it removed (on the rank that removes them; empty elsewhere).
  std::vector<std::string> save(const SaveFault& fault = {});
  int64_t step() const { return step_; }
  AdamW& optimizer() { return opt_; }
  const RunTotals& totals() const { return totals_; }
  // The batch numbers this run skips (given, and added by rollbacks), ascending.
  const std::vector<int64_t>& skipped_batches() const { return skipped_; }

 private:
  // Sums every gradient over the DP group (an expert's over the expert-data-parallel group).
  void reduce_over_dp(std::vector<ParamShard>& params);
  void reduce_loss_over_dp(double& loss);
  // The parameters the optimizer steps (a pipeline's include a tied head's copy).
  std::vector<ParamShard> parameters();
  // The model's own parameters (what a checkpoint holds: every pipeline chunk's, no tied copy).
  std::vector<ParamShard> model_parameters();
  void set_backward_hook(const std::function<void(int64_t)>& hook);
  // Parameters, moments, step and the divergence state from a checkpoint; returns its state.
  nlohmann::json load_state(const std::string& path);
  // True when `mine` is true on any rank of the run (tp x pp x dp): every rank decides alike.
  bool any_rank(bool mine);
  // The diverged step's incident: stops (throws) or rolls back to the latest checkpoint.
  Incident handle_divergence(const std::string& reason, int64_t batch);
  // The step's micro-batch i of batch `batch` (1-based), poisoned when the test hook says so.
  void draw_batch(int64_t batch, int64_t i, Tensor& tokens, Tensor& targets) const;

  std::vector<std::pair<std::string, const TimedCommunicator*>> timed_groups_;
  CausalLM& model_;
  const TokenCorpus& corpus_;
  TrainOptions o_;
  Communicator* dp_;
  Pipeline* pipeline_;
  Communicator *ep_, *edp_;
  int dp_size_ = 1, dp_rank_ = 0;
  AdamW opt_;
  std::unique_ptr<DistributedAdamW> dist_;  // ZeRO-1 (dp > 1 with distributed_optimizer)
  std::unique_ptr<GradientBuckets> buckets_;  // dp > 1 with dp_bucket_bytes
  int64_t step_ = 0;
  DivergenceMonitor monitor_;
  std::vector<int64_t> skipped_;  // sorted
  RunTotals totals_;
};

}  // namespace tensorpar

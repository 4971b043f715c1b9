// TrainMetrics (see train_metrics.h). Names share the `tensorpar:` prefix of the serving metrics.
#include "train/train_metrics.h"

#include <cmath>

#include "core/prometheus_text.h"

namespace tensorpar {

TrainMetrics::TrainMetrics(int world_size, int64_t tokens_per_step)
    : tokens_per_step_(tokens_per_step), collective_s_(size_t(world_size), 0.0) {}

void TrainMetrics::record(const StepLog& log, const RunTotals& totals) {
  std::lock_guard lock(mu_);
  totals_ = totals;
  if (log.incident) return;  // the step was not taken: the last step's values stand
  step_ = log.step;
  loss_ = log.loss;
  grad_norm_ = log.grad_norm;
  lr_ = log.lr;
  tokens_per_s_ = log.tokens_per_s;
  step_s_ = log.ms / 1000.0;
  if (log.val_loss) val_loss_ = *log.val_loss;
}

void TrainMetrics::set_collective_seconds(const std::vector<double>& seconds) {
  std::lock_guard lock(mu_);
  collective_s_ = seconds;
}

std::string TrainMetrics::render_prometheus() const {
  using namespace prometheus;
  std::lock_guard lock(mu_);
  const std::string p = "tensorpar:train_";
  std::string out;
  scalar(out, p + "step", "The last optimizer step taken (the step a rollback returned to, after one).", "gauge", "",
         step_);
  scalar(out, p + "loss", "Training loss of the last step (mean over its micro-batches).", "gauge", "", loss_);
  scalar(out, p + "val_loss", "The last validation loss (NaN before the first evaluation).", "gauge", "", val_loss_);
  scalar(out, p + "grad_norm", "Global gradient norm of the last step, before clipping.", "gauge", "", grad_norm_);
  scalar(out, p + "learning_rate", "Learning rate of the last step.", "gauge", "", lr_);
  scalar(out, p + "tokens_per_second", "Training tokens per second of the last step (all ranks).", "gauge", "",
         tokens_per_s_);
  scalar(out, p + "step_seconds", "Wall time of the last step.", "gauge", "", step_s_);
  scalar(out, p + "optimizer_steps_total", "Optimizer steps taken by this process, replays after rollbacks included.",
         "counter", "", totals_.optimizer_steps);
  scalar(out, p + "tokens_total", "Training tokens of the optimizer steps taken.", "counter", "",
         totals_.optimizer_steps * tokens_per_step_);
  scalar(out, p + "incidents_total", "Diverged steps (non-finite loss or gradient norm, loss spikes).", "counter", "",
         totals_.incidents);
  scalar(out, p + "rollbacks_total", "Rollbacks to the latest checkpoint after an incident.", "counter", "",
         totals_.rollbacks);
  scalar(out, p + "checkpoints_written_total", "Checkpoints saved by this run.", "counter", "", totals_.checkpoints);
  header(out, p + "collective_seconds_total", "Seconds each rank spent in collectives and point-to-point calls.",
         "counter");
  for (size_t r = 0; r < collective_s_.size(); ++r)
    sample(out, p + "collective_seconds_total", "rank=\"" + std::to_string(r) + "\"", collective_s_[r]);
  return out;
}

}  // namespace tensorpar

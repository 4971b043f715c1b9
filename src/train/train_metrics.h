// A training run's metrics in Prometheus' text format, for `train --metrics-port`: the last
// step's loss, gradient norm, learning rate and speed, the run's counters (optimizer steps,
// tokens, incidents, rollbacks, checkpoints) and each rank's seconds in collectives. The CLI
// updates it after every step (world rank 0); a scrape renders it from another thread.
#pragma once

#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace tensorpar {

class TrainMetrics {
 public:
  // tokens_per_step: sequences x tokens of one optimizer step (over every DP rank).
  TrainMetrics(int world_size, int64_t tokens_per_step);
  // After a step or an incident (the log Trainer::run passed), with the trainer's totals.
  void record(const StepLog& log, const RunTotals& totals);
  // Cumulative seconds each world rank spent in collectives (index = rank).
  void set_collective_seconds(const std::vector<double>& seconds);
  std::string render_prometheus() const;

 private:
  mutable std::mutex mu_;
  int64_t tokens_per_step_;
  int64_t step_ = 0;
  double loss_ = NAN, grad_norm_ = NAN, lr_ = NAN, tokens_per_s_ = NAN, step_s_ = NAN, val_loss_ = NAN;
  RunTotals totals_;
  std::vector<double> collective_s_;
};

}  // namespace tensorpar

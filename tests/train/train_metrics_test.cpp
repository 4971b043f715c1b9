// A training run's Prometheus metrics: each family with HELP and TYPE and the values of the
// last step taken; an incident updates the counters but not the last step's values.
#include "train/train_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

namespace tensorpar {
namespace {

// The value of the sample line `series` (with its labels as written), or NaN when absent.
double sample_value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, series.size() + 1, series + " ") == 0) return std::stod(line.substr(series.size() + 1));
  return std::nan("");
}

TEST(TrainMetrics, LastStepCountersAndRanks) {
  TrainMetrics m(2, 4 * 128);
  const std::string empty = m.render_prometheus();
  EXPECT_EQ(sample_value(empty, "tensorpar:train_step"), 0);
  EXPECT_TRUE(std::isnan(sample_value(empty, "tensorpar:train_loss")));  // written NaN, not absent
  EXPECT_NE(empty.find("tensorpar:train_loss NaN\n"), std::string::npos);

  StepLog s;
  s.step = 7;
  s.loss = 3.5f;
  s.grad_norm = 0.75;
  s.lr = 0.002f;
  s.tokens_per_s = 1024;
  s.ms = 500;
  s.val_loss = 3.75f;
  RunTotals t{.optimizer_steps = 7, .incidents = 0, .rollbacks = 0, .checkpoints = 2};
  m.record(s, t);
  m.set_collective_seconds({1.5, 2.25});
  StepLog inc;
  inc.step = 8;
  inc.loss = NAN;
  inc.incident.emplace();
  inc.incident->batch = 8;
  inc.incident->reason = "non-finite loss nan";
  t.incidents = 1;
  t.rollbacks = 1;
  m.record(inc, t);

  const std::string text = m.render_prometheus();
  EXPECT_EQ(sample_value(text, "tensorpar:train_step"), 7);
  EXPECT_EQ(sample_value(text, "tensorpar:train_loss"), 3.5);
  EXPECT_EQ(sample_value(text, "tensorpar:train_val_loss"), 3.75);
  EXPECT_EQ(sample_value(text, "tensorpar:train_grad_norm"), 0.75);
  EXPECT_FLOAT_EQ(float(sample_value(text, "tensorpar:train_learning_rate")), 0.002f);
  EXPECT_EQ(sample_value(text, "tensorpar:train_tokens_per_second"), 1024);
  EXPECT_EQ(sample_value(text, "tensorpar:train_step_seconds"), 0.5);
  EXPECT_EQ(sample_value(text, "tensorpar:train_optimizer_steps_total"), 7);
  EXPECT_EQ(sample_value(text, "tensorpar:train_tokens_total"), 7 * 4 * 128);
  EXPECT_EQ(sample_value(text, "tensorpar:train_incidents_total"), 1);
  EXPECT_EQ(sample_value(text, "tensorpar:train_rollbacks_total"), 1);
  EXPECT_EQ(sample_value(text, "tensorpar:train_checkpoints_written_total"), 2);
  EXPECT_EQ(sample_value(text, "tensorpar:train_collective_seconds_total{rank=\"0\"}"), 1.5);
  EXPECT_EQ(sample_value(text, "tensorpar:train_collective_seconds_total{rank=\"1\"}"), 2.25);
  // Every family is announced once, before its samples.
  for (const char* family : {"step", "loss", "incidents_total", "collective_seconds_total"}) {
    const std::string name = std::string("tensorpar:train_") + family;
    const size_t help = text.find("# HELP " + name + " "), type = text.find("# TYPE " + name + " ");
    ASSERT_NE(help, std::string::npos) << name;
    ASSERT_NE(type, std::string::npos) << name;
    EXPECT_LT(type, text.find("\n" + name, type)) << name;
  }
}

}  // namespace
}  // namespace tensorpar

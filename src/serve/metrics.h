// Serving metrics in Prometheus' text format: counters, gauges and histograms that the engine
// updates (rank 0) and GET /metrics renders. Thread-safe.
#pragma once

#include <cstdint>
#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace tensorpar {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implied
  void observe(double v);
  // Appends `name_bucket{le=...}`, `name_sum`, `name_count` lines (with HELP and TYPE).
  void render(std::string& out, const std::string& name, const std::string& help) const;
  // The same with extra labels on every sample, already formatted: `model_name="m"` (or empty).
  void render(std::string& out, const std::string& name, const std::string& help,
              const std::string& labels) const;
  int64_t count() const;
  double sum() const;
  // The q-quantile estimated from the buckets (upper bound of the bucket holding it).
  double quantile(double q) const;

 private:
  mutable std::mutex mu_;
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; last = +Inf
  double sum_ = 0;
  int64_t n_ = 0;
};

struct ServeMetrics {
  ServeMetrics();
  std::string model_name;  // the `model_name` label of every sample (none when empty)
  // Counters. requests_total: requests accepted by submit. e2e is observed once per request
  // that finished, whatever the reason (before its last chunk is pushed, so a client that has
  // its answer sees it counted); successes are e2e.count() - requests_failed - requests_aborted.
  std::atomic<int64_t> requests_total{0}, requests_failed{0}, requests_aborted{0};
  std::atomic<int64_t> prompt_tokens{0}, generation_tokens{0}, preemptions{0};
  std::atomic<int64_t> prefix_query_tokens{0}, prefix_hit_tokens{0};
  std::atomic<int64_t> steps{0};
  // Gauges.
  std::atomic<int64_t> running{0}, waiting{0}, kv_blocks_used{0}, kv_blocks_total{0};
  // Seconds.
  Histogram ttft, inter_token, e2e, queue_time;
  Histogram batch_rows;  // rows (tokens) per engine step
  // Per rank: seconds in collectives and in compute during steps (index = rank).
  mutable std::mutex rank_mu;  // mutable: render_prometheus (const) reads the vectors under it
  std::vector<double> rank_comm_s, rank_compute_s;

  std::string render_prometheus() const;
};

}  // namespace tensorpar

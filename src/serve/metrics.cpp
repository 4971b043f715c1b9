// Serving metrics rendered in Prometheus' text exposition format (version 0.0.4). Names follow
// vLLM's (`vllm:num_requests_running` -> `tensorpar:num_requests_running`), so dashboards written
// for it need only the prefix changed.
#include "serve/metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/prometheus_text.h"

namespace tensorpar {

using namespace prometheus;

Histogram::Histogram(std::vector<double> upper_bounds) : bounds_(std::move(upper_bounds)) {
  for (size_t i = 0; i < bounds_.size(); ++i) {
    TP_CHECK(std::isfinite(bounds_[i]), "[Histogram] bucket bound ", i, " is not finite: got ",
             bounds_[i], ", expected a finite number (+Inf is implied)");
    TP_CHECK(i == 0 || bounds_[i] > bounds_[i - 1], "[Histogram] bucket bounds must ascend: got ",
             bounds_[i], " after ", bounds_[i - 1]);
  }
  counts_.assign(bounds_.size() + 1, 0);
}

void Histogram::observe(double v) {
  // Prometheus buckets are `le` (less or equal): v lands in the first bound >= v.
  const size_t b = size_t(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard lock(mu_);
  ++counts_[b];
  sum_ += v;
  ++n_;
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help) const {
  render(out, name, help, "");
}

void Histogram::render(std::string& out, const std::string& name, const std::string& help,
                       const std::string& labels) const {
  std::vector<int64_t> counts;
  double sum;
  int64_t n;
  {
    std::lock_guard lock(mu_);
    counts = counts_;
    sum = sum_;
    n = n_;
  }
  header(out, name, help, "histogram");
  int64_t cumulative = 0;
  for (size_t b = 0; b < counts.size(); ++b) {
    cumulative += counts[b];
    const double le = b < bounds_.size() ? bounds_[b] : std::numeric_limits<double>::infinity();
    sample(out, name + "_bucket", join_labels(labels, "le=\"" + format_number(le) + "\""),
           cumulative);
  }
  sample(out, name + "_sum", labels, sum);
  sample(out, name + "_count", labels, n);
}

int64_t Histogram::count() const {
  std::lock_guard lock(mu_);
  return n_;
}

double Histogram::sum() const {
  std::lock_guard lock(mu_);
  return sum_;
}

double Histogram::quantile(double q) const {
  std::lock_guard lock(mu_);
  if (n_ == 0) return 0;
  // The rank of the q-quantile among n observations, 1-based: the smallest r with r >= q * n.
  const int64_t rank = std::clamp<int64_t>(int64_t(std::ceil(q * double(n_))), 1, n_);
  int64_t cumulative = 0;
  for (size_t b = 0; b < counts_.size(); ++b) {
    cumulative += counts_[b];
    if (cumulative >= rank)
      return b < bounds_.size() ? bounds_[b] : std::numeric_limits<double>::infinity();
  }
  return std::numeric_limits<double>::infinity();
}

// Bucket bounds: vLLM's latency buckets, extended downwards for queue times and upwards for
// the slower steps of CPU serving.
ServeMetrics::ServeMetrics()
    : ttft({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,  0.75,
            1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0}),
      inter_token({0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3, 0.4,
                   0.5,   0.75,  1.0,  2.5,   5.0,  7.5,   10.0, 20.0, 40.0, 80.0}),
      e2e({0.1,  0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,
           20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}),
      queue_time({0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0,
                  80.0, 160.0, 640.0}),
      batch_rows({1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192}) {}

std::string ServeMetrics::render_prometheus() const {
  const std::string p = "tensorpar:";
  const std::string m =
      model_name.empty() ? std::string() : "model_name=\"" + escape_label(model_name) + "\"";
  std::string out;
  out.reserve(8192);

  scalar(out, p + "num_requests_running", "Requests in the running batch.", "gauge", m,
         running.load());
  scalar(out, p + "num_requests_waiting", "Requests waiting to be scheduled.", "gauge", m,
         waiting.load());
  const int64_t used = kv_blocks_used.load(), total = kv_blocks_total.load();
  scalar(out, p + "kv_cache_blocks_used",
         "KV cache blocks in use (per rank; identical on every rank).", "gauge", m, used);
  scalar(out, p + "kv_cache_blocks_total", "KV cache blocks in the pool.", "gauge", m, total);
  scalar(out, p + "kv_cache_usage_perc", "Fraction of KV cache blocks in use (1 = full).", "gauge",
         m, total > 0 ? double(used) / double(total) : 0.0);

  const int64_t queried = prefix_query_tokens.load(), hit = prefix_hit_tokens.load();
  scalar(out, p + "prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
         "counter", m, queried);
  scalar(out, p + "prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", "counter",
         m, hit);
  scalar(out, p + "prefix_cache_hit_rate", "Prefix cache hit tokens / queried tokens since start.",
         "gauge", m, queried > 0 ? double(hit) / double(queried) : 0.0);

  scalar(out, p + "prompt_tokens_total", "Prompt tokens processed.", "counter", m,
         prompt_tokens.load());
  scalar(out, p + "generation_tokens_total", "Tokens generated.", "counter", m,
         generation_tokens.load());
  scalar(out, p + "preemptions_total", "Sequences preempted (KV blocks freed, recomputed later).",
         "counter", m, preemptions.load());
  scalar(out, p + "engine_steps_total", "Engine steps (batched forwards) run.", "counter", m,
         steps.load());

  scalar(out, p + "requests_total", "Requests accepted.", "counter", m, requests_total.load());
  const int64_t finished = e2e.count(), failed = requests_failed.load(),
                aborted = requests_aborted.load();
  scalar(out, p + "request_success_total", "Requests finished normally (stop or length).",
         "counter", m, std::max<int64_t>(0, finished - failed - aborted));
  scalar(out, p + "request_failed_total", "Requests ended by an error.", "counter", m, failed);
  scalar(out, p + "request_aborted_total", "Requests cancelled (client gone or shutdown).",
         "counter", m, aborted);

  ttft.render(out, p + "time_to_first_token_seconds", "Time to first token, from arrival.", m);
  inter_token.render(out, p + "inter_token_latency_seconds", "Time between consecutive tokens.", m);
  e2e.render(out, p + "e2e_request_latency_seconds", "Request latency, arrival to finish.", m);
  queue_time.render(out, p + "request_queue_time_seconds", "Time waiting before the first step.",
                    m);
  batch_rows.render(out, p + "batch_rows_per_step", "Rows (tokens) per engine step.", m);

  // Per rank: a label per rank under one HELP/TYPE, as Prometheus wants a family once.
  std::vector<double> comm, compute;
  {
    std::lock_guard lock(rank_mu);
    comm = rank_comm_s;
    compute = rank_compute_s;
  }
  const auto per_rank = [&](const std::string& name, const std::string& help,
                            const std::vector<double>& v) {
    header(out, name, help, "counter");
    for (size_t r = 0; r < v.size(); ++r)
      sample(out, name, join_labels(m, "rank=\"" + std::to_string(r) + "\""), v[r]);
  };
  per_rank(p + "rank_collective_seconds_total", "Seconds each rank spent in collectives in steps.",
           comm);
  per_rank(p + "rank_compute_seconds_total", "Seconds each rank spent computing in steps.",
           compute);
  return out;
}

}  // namespace tensorpar

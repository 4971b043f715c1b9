// Prometheus rendering of the serving metrics: cumulative histogram buckets with sum and count,
// quantiles from buckets, every family with HELP and TYPE, labels, derived gauges; expected
// text written out by hand.
// GCC 12 under ASan at -O2 falsely flags libstdc++'s own <regex> internals as maybe-uninitialized;
// the warning is about the standard library header, not this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "serve/metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"

namespace tensorpar {
namespace {

// The value of the one sample line `name` (with its labels as written), or NaN when absent.
double sample_value(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (line.compare(0, series.size() + 1, series + " ") == 0)
      return std::stod(line.substr(series.size() + 1));
  return std::nan("");
}

TEST(Histogram, BucketsAreCumulativeWithSumAndCount) {
  Histogram h({1, 2, 5});
  // 1 sits in le="1" (Prometheus buckets are <=); 10 only in +Inf.
  for (double v : {0.5, 1.0, 1.5, 3.0, 10.0}) h.observe(v);
  std::string out;
  h.render(out, "lat_seconds", "Latency.");
  EXPECT_EQ(out,
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"1\"} 2\n"
            "lat_seconds_bucket{le=\"2\"} 3\n"
            "lat_seconds_bucket{le=\"5\"} 4\n"
            "lat_seconds_bucket{le=\"+Inf\"} 5\n"
            "lat_seconds_sum 16\n"
            "lat_seconds_count 5\n");
  EXPECT_EQ(h.count(), 5);
  EXPECT_DOUBLE_EQ(h.sum(), 16.0);
}

TEST(Histogram, LabelsGoBeforeLe) {
  Histogram h({0.25});
  h.observe(0.1);
  h.observe(0.125);
  std::string out;
  h.render(out, "x", "X.", "model_name=\"m\"");
  EXPECT_NE(out.find("x_bucket{model_name=\"m\",le=\"0.25\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_bucket{model_name=\"m\",le=\"+Inf\"} 2\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_sum{model_name=\"m\"} 0.225\n"), std::string::npos) << out;
  EXPECT_NE(out.find("x_count{model_name=\"m\"} 2\n"), std::string::npos) << out;
}

TEST(Histogram, QuantileIsTheUpperBoundOfItsBucket) {
  Histogram h({1, 2, 5});
  EXPECT_EQ(h.quantile(0.5), 0);  // no observations
  for (double v : {0.5, 1.0, 1.5, 3.0, 10.0}) h.observe(v);
  // Sorted: 0.5 1 | 1.5 | 3 | 10. The q-quantile is observation ceil(q * 5).
  EXPECT_EQ(h.quantile(0.0), 1);
  EXPECT_EQ(h.quantile(0.4), 1);  // 2nd
  EXPECT_EQ(h.quantile(0.5), 2);  // 3rd
  EXPECT_EQ(h.quantile(0.8), 5);  // 4th
  EXPECT_TRUE(std::isinf(h.quantile(0.99)));
}

TEST(Histogram, BoundsMustAscend) {
  EXPECT_THROW(Histogram({1, 1}), Error);
  EXPECT_THROW(Histogram({2, 1}), Error);
  EXPECT_THROW(Histogram({1, INFINITY}), Error);
}

TEST(Histogram, ConcurrentObservationsAllCount) {
  Histogram h({0.5});
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 1000; ++i) h.observe(i % 2 ? 1.0 : 0.0);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(h.count(), 4000);
  EXPECT_DOUBLE_EQ(h.sum(), 2000.0);
  EXPECT_EQ(h.quantile(0.5), 0.5);
}

TEST(ServeMetrics, RendersCountersGaugesAndDerivedValues) {
  ServeMetrics m;
  m.requests_total = 12;  // accepted; 10 of them finished (one e2e observation each)
  for (int i = 0; i < 10; ++i) m.e2e.observe(1.5);
  m.requests_failed = 1;
  m.requests_aborted = 2;
  m.prompt_tokens = 1234;
  m.generation_tokens = 567;
  m.preemptions = 3;
  m.prefix_query_tokens = 40;
  m.prefix_hit_tokens = 10;
  m.running = 4;
  m.waiting = 6;
  m.kv_blocks_used = 25;
  m.kv_blocks_total = 100;
  m.rank_comm_s = {0.5, 0.75};
  m.rank_compute_s = {2.0, 2.5};
  m.ttft.observe(0.03);
  m.batch_rows.observe(16);
  m.batch_rows.observe(17);
  const std::string t = m.render_prometheus();

  EXPECT_EQ(sample_value(t, "tensorpar:num_requests_running"), 4);
  EXPECT_EQ(sample_value(t, "tensorpar:num_requests_waiting"), 6);
  EXPECT_EQ(sample_value(t, "tensorpar:prompt_tokens_total"), 1234);
  EXPECT_EQ(sample_value(t, "tensorpar:generation_tokens_total"), 567);
  EXPECT_EQ(sample_value(t, "tensorpar:preemptions_total"), 3);
  EXPECT_EQ(sample_value(t, "tensorpar:kv_cache_blocks_used"), 25);
  EXPECT_EQ(sample_value(t, "tensorpar:kv_cache_blocks_total"), 100);
  EXPECT_EQ(sample_value(t, "tensorpar:kv_cache_usage_perc"), 0.25);
  EXPECT_EQ(sample_value(t, "tensorpar:prefix_cache_hit_rate"), 0.25);  // 10 of 40
  EXPECT_EQ(sample_value(t, "tensorpar:request_success_total"), 7);     // 10 - 1 - 2
  EXPECT_EQ(sample_value(t, "tensorpar:request_failed_total"), 1);
  EXPECT_EQ(sample_value(t, "tensorpar:request_aborted_total"), 2);
  EXPECT_EQ(sample_value(t, "tensorpar:rank_collective_seconds_total{rank=\"0\"}"), 0.5);
  EXPECT_EQ(sample_value(t, "tensorpar:rank_collective_seconds_total{rank=\"1\"}"), 0.75);
  EXPECT_EQ(sample_value(t, "tensorpar:rank_compute_seconds_total{rank=\"1\"}"), 2.5);
  EXPECT_EQ(sample_value(t, "tensorpar:time_to_first_token_seconds_bucket{le=\"0.02\"}"), 0);
  EXPECT_EQ(sample_value(t, "tensorpar:time_to_first_token_seconds_bucket{le=\"0.04\"}"), 1);
  EXPECT_EQ(sample_value(t, "tensorpar:time_to_first_token_seconds_count"), 1);
  EXPECT_EQ(sample_value(t, "tensorpar:batch_rows_per_step_bucket{le=\"16\"}"), 1);
  EXPECT_EQ(sample_value(t, "tensorpar:batch_rows_per_step_bucket{le=\"32\"}"), 2);
  EXPECT_EQ(sample_value(t, "tensorpar:batch_rows_per_step_sum"), 33);
  for (const char* h : {"inter_token_latency_seconds", "request_queue_time_seconds"})
    EXPECT_EQ(sample_value(t, std::string("tensorpar:") + h + "_count"), 0) << h;
  EXPECT_NE(t.find("# TYPE tensorpar:prompt_tokens_total counter\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE tensorpar:num_requests_running gauge\n"), std::string::npos);
  EXPECT_NE(t.find("# TYPE tensorpar:e2e_request_latency_seconds histogram\n"), std::string::npos);
}

TEST(ServeMetrics, EmptyPoolAndNoQueriesRenderZeroRates) {
  ServeMetrics m;
  const std::string t = m.render_prometheus();
  EXPECT_EQ(sample_value(t, "tensorpar:prefix_cache_hit_rate"), 0);
  EXPECT_EQ(sample_value(t, "tensorpar:kv_cache_usage_perc"), 0);
  EXPECT_EQ(sample_value(t, "tensorpar:request_success_total"), 0);
}

TEST(ServeMetrics, EveryLineIsValidExpositionFormat) {
  ServeMetrics m;
  m.model_name = "smol \"q4\"\\x";
  m.rank_comm_s = {1.0};
  m.rank_compute_s = {1.0};
  m.e2e.observe(1.0);
  const std::string t = m.render_prometheus();
  // name{labels} value, labels with escaped quotes and backslashes.
  const std::string name = R"(([a-zA-Z_:][a-zA-Z0-9_:]*))";
  const std::string labels = R"re((\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})?)re";
  const std::regex sample("^" + name + labels + R"( (-?[0-9.e+-]+|\+Inf|NaN)$)");
  const std::regex help(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) .+$)");
  const std::regex type(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram)$)");
  std::istringstream in(t);
  std::string line, family;
  std::set<std::string> typed;
  int samples = 0;
  while (std::getline(in, line)) {
    std::smatch mm;
    if (std::regex_match(line, mm, help)) {
      family = mm[1];
      continue;
    }
    if (std::regex_match(line, mm, type)) {
      EXPECT_EQ(mm[1], family) << "TYPE without its HELP: " << line;
      EXPECT_TRUE(typed.insert(family).second) << "family declared twice: " << family;
      continue;
    }
    ASSERT_TRUE(std::regex_match(line, mm, sample)) << line;
    const std::string name = mm[1];
    // A sample belongs to the family declared just before it (histograms add suffixes).
    EXPECT_TRUE(name == family || name == family + "_bucket" || name == family + "_sum" ||
                name == family + "_count")
        << name << " under " << family;
    EXPECT_NE(line.find("model_name=\"smol \\\"q4\\\"\\\\x\""), std::string::npos) << line;
    ++samples;
  }
  EXPECT_GT(samples, 100);
  for (const char* f :
       {"tensorpar:num_requests_running", "tensorpar:num_requests_waiting",
        "tensorpar:prompt_tokens_total", "tensorpar:generation_tokens_total",
        "tensorpar:time_to_first_token_seconds", "tensorpar:inter_token_latency_seconds",
        "tensorpar:e2e_request_latency_seconds", "tensorpar:request_queue_time_seconds",
        "tensorpar:kv_cache_blocks_used", "tensorpar:kv_cache_blocks_total",
        "tensorpar:prefix_cache_hit_rate", "tensorpar:batch_rows_per_step",
        "tensorpar:rank_collective_seconds_total", "tensorpar:rank_compute_seconds_total",
        "tensorpar:preemptions_total", "tensorpar:request_success_total",
        "tensorpar:request_failed_total", "tensorpar:request_aborted_total"})
    EXPECT_TRUE(typed.count(f)) << f;
}

}  // namespace
}  // namespace tensorpar

// What the benchmarks share: seconds per call as the median of samples of >= 25 ms each, two
// calls timed with their samples interleaved, and deterministic input data.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "median.h"

namespace tensorpar {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Calls of fn that last >= 25 ms (after one warm-up call).
template <typename Fn>
int calibrate(Fn& fn) {
  fn();
  const auto t0 = Clock::now();
  fn();
  return std::max(1, int(0.025 / std::max(seconds_since(t0), 1e-7)));
}

template <typename Fn>
double sample(Fn& fn, int iters) {
  const auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) fn();
  return seconds_since(t0) / iters;
}

constexpr int kSamples = 7;

// Seconds per call: the median of kSamples samples of >= 25 ms each.
template <typename Fn>
double seconds_per_call(Fn&& fn) {
  const int iters = calibrate(fn);
  std::vector<double> s;
  for (int r = 0; r < kSamples; ++r) s.push_back(sample(fn, iters));
  return median(s);
}

// Seconds per call of a and of b, their samples interleaved so that load from other processes
// on this shared machine hits both alike; medians.
template <typename A, typename B>
std::pair<double, double> paired_seconds_per_call(A&& a, B&& b) {
  const int ia = calibrate(a), ib = calibrate(b);
  std::vector<double> sa, sb;
  for (int r = 0; r < kSamples; ++r) sa.push_back(sample(a, ia)), sb.push_back(sample(b, ib));
  return {median(sa), median(sb)};
}

// Deterministic values in [-1, 1): benchmark data need not be test-grade random, only nonzero.
inline std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = float(int64_t(x >> 40) - (int64_t(1) << 23)) / float(1 << 23);
  }
  return v;
}

}  // namespace tensorpar

// Shared helpers for tests: fresh random inputs each run (seeded from the clock unless
// TENSORPAR_TEST_SEED is set; the seed is printed on failure), NaN-poisoned outputs, and
// max-abs/relative error measures.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

#include "core/tensor.h"

namespace tensorpar::testing {

inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("TENSORPAR_TEST_SEED")) return uint64_t(std::strtoull(s, nullptr, 10));
    return uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  }();
  return seed;
}

// A generator seeded per test from test_seed(); SCOPED_TRACE the seed so failures can be rerun.
class Rng {
 public:
  explicit Rng(uint64_t salt = 0) : gen_(test_seed() ^ (salt * 0x9e3779b97f4a7c15ull)) {}
  float uniform(float lo = -1, float hi = 1) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  float normal(float stddev = 1) { return std::normal_distribution<float>(0, stddev)(gen_); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi - 1)(gen_); }
  std::vector<float> uniform_vec(size_t n, float lo = -1, float hi = 1) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }
  Tensor uniform_tensor(const Shape& shape, DType dtype = DType::kF32, float lo = -1, float hi = 1) {
    auto v = uniform_vec(size_t(shape_numel(shape)), lo, hi);
    return Tensor::from_f32(shape, v, dtype);
  }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
};

// An owning tensor filled with NaN, so any element a kernel forgets to write fails the test.
inline Tensor nan_tensor(const Shape& shape, DType dtype = DType::kF32) {
  Tensor t = Tensor::empty(shape, dtype);
  t.fill(std::numeric_limits<float>::quiet_NaN());
  return t;
}

inline double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

// max |a-b| / max(|b|, floor): relative error with a floor for values near zero.
inline double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-3) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i])) / std::max(std::fabs(double(b[i])), floor);
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

#define TP_SEED_TRACE() SCOPED_TRACE(::testing::Message() << "TENSORPAR_TEST_SEED=" << ::tensorpar::testing::test_seed())

}  // namespace tensorpar::testing

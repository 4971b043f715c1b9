// Shared helpers for kernel tests: central finite differences in double precision (of a
// double-precision reference forward, so the expected gradient is accurate to ~1e-9),
// float/double conversion, NaN-filled buffers, and an element-wise closeness check that
// reports the worst element.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstddef>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/error.h"

namespace tensorpar::testing {

// Sanitizer builds run the same tests on smaller sizes.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif

inline std::vector<double> to_double(const std::vector<float>& v) {
  return std::vector<double>(v.begin(), v.end());
}

inline std::vector<float> to_float(const std::vector<double>& v) {
  std::vector<float> r(v.size());
  for (size_t i = 0; i < v.size(); ++i) r[i] = static_cast<float>(v[i]);
  return r;
}

inline std::vector<float> nan_vec(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// sum(out * w): the scalar loss whose gradient wrt out is w.
inline double weighted_sum(const std::vector<double>& out, const std::vector<double>& w) {
  double s = 0;
  for (size_t i = 0; i < out.size(); ++i) s += out[i] * w[i];
  return s;
}

// Central differences of f at x, in double: g_i = (f(x + h e_i) - f(x - h e_i)) / 2h.
inline std::vector<double> numeric_grad(const std::function<double(const std::vector<double>&)>& f,
                                        std::vector<double> x, double h = 1e-5) {
  std::vector<double> g(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f(x);
    x[i] = x0 - h;
    const double fm = f(x);
    x[i] = x0;
    g[i] = (fp - fm) / (2 * h);
  }
  return g;
}

// Expects |got[i] - want[i]| <= atol + rtol * |want[i]| for every i (NaN fails), reporting the
// worst element.
inline void expect_close(const std::vector<float>& got, const std::vector<double>& want,
                         double atol, double rtol, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t worst = 0;
  double worst_excess = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
    const double excess = std::isnan(err) ? std::numeric_limits<double>::infinity()
                                          : err - (atol + rtol * std::fabs(want[i]));
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_LE(worst_excess, 0.0) << what << ": element " << worst << " got " << got[worst]
                               << ", want " << want[worst] << " (atol " << atol << ", rtol " << rtol
                               << ")";
}

inline void expect_close(const std::vector<float>& got, const std::vector<float>& want, double atol,
                         double rtol, const std::string& what) {
  expect_close(got, to_double(want), atol, rtol, what);
}

// want + d (element-wise): the value an accumulating (+=) gradient should reach from `init`.
inline std::vector<double> plus(const std::vector<float>& init, const std::vector<double>& d) {
  std::vector<double> r(d.size());
  for (size_t i = 0; i < d.size(); ++i) r[i] = static_cast<double>(init[i]) + d[i];
  return r;
}

// Runs f with the calling thread's OpenMP team size set to n, then restores it.
template <typename F>
void with_threads(int n, F&& f) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(n);
  f();
  omp_set_num_threads(saved);
}

// Runs f and expects a tensorpar::Error whose message contains every one of `parts`.
template <typename F>
void expect_error_with(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected tensorpar::Error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : parts)
      EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  } catch (...) {
    ADD_FAILURE() << "expected tensorpar::Error, got another exception";
  }
}

}  // namespace tensorpar::testing

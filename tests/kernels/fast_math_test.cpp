// The vectorised exp and the row primitives built on it: accuracy over the whole float range
// against double-precision exp, exact limits (-inf -> 0, +inf -> inf, NaN passes through).
#include "kernels/cpu/fast_math.h"

#include <cmath>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::Rng;

TEST(FastMath, ExpRelativeErrorOverTheRange) {
  double worst = 0;
  float worst_x = 0;
  for (float x = -87.0f; x < 88.5f; x += 0.00137f) {
    const double want = std::exp(static_cast<double>(x));
    const double err = std::fabs(fast_exp(x) - want) / want;
    if (err > worst) {
      worst = err;
      worst_x = x;
    }
  }
  EXPECT_LT(worst, 2e-7) << "at x=" << worst_x;
}

TEST(FastMath, ExpLimits) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(fast_exp(-inf), 0.0f);
  EXPECT_EQ(fast_exp(-1000.0f), 0.0f);
  EXPECT_EQ(fast_exp(inf), inf);
  EXPECT_EQ(fast_exp(1000.0f), inf);
  EXPECT_EQ(fast_exp(0.0f), 1.0f);
  EXPECT_TRUE(std::isnan(fast_exp(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_NEAR(fast_exp(88.7f), std::exp(double(88.7f)),
              1e-6 * std::exp(double(88.7f)));  // near FLT_MAX
  EXPECT_EQ(fast_sigmoid(-inf), 0.0f);
  EXPECT_EQ(fast_sigmoid(inf), 1.0f);
  EXPECT_EQ(fast_tanh(inf), 1.0f);
  EXPECT_EQ(fast_tanh(-inf), -1.0f);
}

TEST(FastMath, RowPrimitivesMatchDouble) {
  TP_SEED_TRACE();
  Rng rng(1);
  for (int64_t n : {0, 1, 7, 33, 577, 5000}) {
    const auto x = rng.uniform_vec(static_cast<size_t>(n), -20, 20);
    double m = -INFINITY, want_sum = 0;
    for (float v : x) m = std::max(m, double(v));
    EXPECT_EQ(row_max(x.data(), n), static_cast<float>(m));
    if (n == 0) continue;
    std::vector<double> want_y;
    for (float v : x) {
      // The argument is rounded to float (x - m) before the exp, as in the kernel.
      want_y.push_back(std::exp(double(v - static_cast<float>(m))));
      want_sum += want_y.back();
    }
    EXPECT_NEAR(exp_sum(x.data(), static_cast<float>(m), n), want_sum, 1e-6 * want_sum);
    std::vector<float> y(x.size());
    EXPECT_NEAR(exp_store_sum(y.data(), x.data(), static_cast<float>(m), n), want_sum,
                1e-6 * want_sum);
    expect_close(y, want_y, 1e-30, 1e-6, "exp_store_sum n=" + std::to_string(n));
    const auto y0 = rng.uniform_vec(x.size());
    auto z = y0;
    add_scaled_exp(z.data(), x.data(), static_cast<float>(m), 0.5f, -0.25f, n);
    std::vector<double> want_z;
    for (size_t i = 0; i < x.size(); ++i) want_z.push_back(y0[i] + 0.5 * want_y[i] - 0.25);
    expect_close(z, want_z, 1e-6, 1e-6, "add_scaled_exp n=" + std::to_string(n));
  }
}

}  // namespace
}  // namespace tensorpar

// RMSNorm: forward and saved rstd against a double-precision formula, backward (d_inp and
// d_weight, accumulating) against central differences of that formula.
#include "kernels/cpu/rmsnorm.h"

#include <cmath>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::nan_vec;
using testing::Rng;

// out (N,C) in double; rstd (N) if non-null.
std::vector<double> ref_rmsnorm(const std::vector<double>& x, const std::vector<double>& w,
                                int64_t N, int64_t C, double eps, std::vector<double>* rstd) {
  std::vector<double> out(x.size());
  if (rstd) rstd->resize(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    double ss = 0;
    for (int64_t c = 0; c < C; ++c)
      ss += x[static_cast<size_t>(n * C + c)] * x[static_cast<size_t>(n * C + c)];
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c)
      out[static_cast<size_t>(n * C + c)] =
          x[static_cast<size_t>(n * C + c)] * r * w[static_cast<size_t>(c)];
    if (rstd) (*rstd)[static_cast<size_t>(n)] = r;
  }
  return out;
}

TEST(RmsNorm, ForwardMatchesDoubleFormula) {
  TP_SEED_TRACE();
  Rng rng(1);
  const float eps = 1e-5f;
  for (int64_t N : {1, 7, 33, 577})
    for (int64_t C : {1, 7, 33, 577}) {
      const auto x = rng.uniform_vec(static_cast<size_t>(N * C), -3, 3);
      const auto w = rng.uniform_vec(static_cast<size_t>(C), 0.5, 1.5);
      std::vector<double> want_rstd;
      const auto want =
          ref_rmsnorm(testing::to_double(x), testing::to_double(w), N, C, eps, &want_rstd);
      auto out = nan_vec(x.size()), rstd = nan_vec(static_cast<size_t>(N));
      rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
      const std::string what = "N=" + std::to_string(N) + " C=" + std::to_string(C);
      expect_close(out, want, 1e-5, 1e-5, "out " + what);
      expect_close(rstd, want_rstd, 0, 1e-5, "rstd " + what);
      // In place, without saving rstd (inference).
      auto inplace = x;
      rmsnorm_forward(inplace.data(), nullptr, inplace.data(), w.data(), N, C, eps);
      expect_close(inplace, out, 0, 0, "in place " + what);
    }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(2);
  const float eps = 1e-5f;
  for (int64_t N : {1, 3})
    for (int64_t C : {1, 7, 33}) {
      const auto x = rng.uniform_vec(static_cast<size_t>(N * C), -2, 2);
      const auto w = rng.uniform_vec(static_cast<size_t>(C), 0.5, 1.5);
      const auto dy = rng.uniform_vec(static_cast<size_t>(N * C));
      const auto dyd = testing::to_double(dy), xd = testing::to_double(x),
                 wd = testing::to_double(w);
      const auto want_dx = testing::numeric_grad(
          [&](const std::vector<double>& xx) {
            return testing::weighted_sum(ref_rmsnorm(xx, wd, N, C, eps, nullptr), dyd);
          },
          xd);
      const auto want_dw = testing::numeric_grad(
          [&](const std::vector<double>& ww) {
            return testing::weighted_sum(ref_rmsnorm(xd, ww, N, C, eps, nullptr), dyd);
          },
          wd);
      std::vector<float> out(x.size()), rstd(static_cast<size_t>(N));
      rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, eps);
      // Gradients accumulate: start from random values.
      const auto dx0 = rng.uniform_vec(x.size()), dw0 = rng.uniform_vec(w.size());
      auto dx = dx0, dw = dw0;
      rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
      const std::string what = "N=" + std::to_string(N) + " C=" + std::to_string(C);
      expect_close(dx, testing::plus(dx0, want_dx), 1e-5, 1e-4, "d_inp " + what);
      expect_close(dw, testing::plus(dw0, want_dw), 1e-5, 1e-4, "d_weight " + what);
    }
}

TEST(RmsNorm, WeightGradientOverManyRows) {
  TP_SEED_TRACE();
  Rng rng(3);
  const int64_t N = 577, C = 130;
  const auto x = rng.uniform_vec(static_cast<size_t>(N * C));
  const auto w = rng.uniform_vec(static_cast<size_t>(C));
  const auto dy = rng.uniform_vec(static_cast<size_t>(N * C));
  std::vector<float> out(x.size()), rstd(static_cast<size_t>(N));
  rmsnorm_forward(out.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  std::vector<double> want(static_cast<size_t>(C), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      want[static_cast<size_t>(c)] += double(dy[static_cast<size_t>(n * C + c)]) *
                                      x[static_cast<size_t>(n * C + c)] *
                                      rstd[static_cast<size_t>(n)];
  std::vector<float> dw(static_cast<size_t>(C), 0.0f);
  rmsnorm_backward(nullptr, dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  expect_close(dw, want, 1e-4, 1e-4, "d_weight");
}

TEST(RmsNorm, ResultsDoNotDependOnThreadCount) {
  TP_SEED_TRACE();
  Rng rng(4);
  const int64_t N = 333, C = 200;  // above the parallel threshold
  const auto x = rng.uniform_vec(static_cast<size_t>(N * C));
  const auto w = rng.uniform_vec(static_cast<size_t>(C));
  const auto dy = rng.uniform_vec(x.size());
  std::vector<float> out[2], dx[2], dw[2];
  for (int run = 0; run < 2; ++run)
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      std::vector<float> rstd(static_cast<size_t>(N));
      out[run].resize(x.size());
      rmsnorm_forward(out[run].data(), rstd.data(), x.data(), w.data(), N, C, 1e-5f);
      dx[run].assign(x.size(), 0.0f);
      dw[run].assign(w.size(), 0.0f);
      rmsnorm_backward(dx[run].data(), dw[run].data(), dy.data(), x.data(), w.data(), rstd.data(),
                       N, C);
    });
  EXPECT_EQ(out[0], out[1]);
  EXPECT_EQ(dx[0], dx[1]);
  EXPECT_EQ(dw[0], dw[1]);
}

TEST(RmsNorm, BadSizesAreErrors) {
  float x = 1, w = 1, o = 0;
  EXPECT_THROW(rmsnorm_forward(&o, nullptr, &x, &w, 1, 0, 1e-5f), Error);
  EXPECT_THROW(rmsnorm_forward(&o, nullptr, &x, &w, -1, 1, 1e-5f), Error);
}

}  // namespace
}  // namespace tensorpar

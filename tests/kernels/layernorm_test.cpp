// LayerNorm: forward and saved mean/rstd against a double-precision formula, backward
// (d_inp, d_weight, d_bias, accumulating) against central differences of that formula.
#include "kernels/cpu/layernorm.h"

#include <cmath>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::nan_vec;
using testing::Rng;

// out (N,C) in double; bias may be empty (none).
std::vector<double> ref_layernorm(const std::vector<double>& x, const std::vector<double>& w,
                                  const std::vector<double>& bias, int64_t N, int64_t C, double eps,
                                  std::vector<double>* mean = nullptr,
                                  std::vector<double>* rstd = nullptr) {
  std::vector<double> out(x.size());
  for (int64_t n = 0; n < N; ++n) {
    const double* xr = x.data() + n * C;
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += xr[c];
    m /= static_cast<double>(C);
    for (int64_t c = 0; c < C; ++c) v += (xr[c] - m) * (xr[c] - m);
    const double r = 1.0 / std::sqrt(v / static_cast<double>(C) + eps);
    for (int64_t c = 0; c < C; ++c)
      out[static_cast<size_t>(n * C + c)] = (xr[c] - m) * r * w[static_cast<size_t>(c)] +
                                            (bias.empty() ? 0.0 : bias[static_cast<size_t>(c)]);
    if (mean) mean->push_back(m);
    if (rstd) rstd->push_back(r);
  }
  return out;
}

TEST(LayerNorm, ForwardMatchesDoubleFormula) {
  TP_SEED_TRACE();
  Rng rng(1);
  const float eps = 1e-5f;
  for (bool with_bias : {true, false})
    for (int64_t N : {1, 7, 33, 577})
      for (int64_t C : {1, 7, 33, 577}) {
        // An offset far from zero: the two-pass variance must not cancel.
        const auto x = rng.uniform_vec(static_cast<size_t>(N * C), 97, 103);
        const auto w = rng.uniform_vec(static_cast<size_t>(C), 0.5, 1.5);
        const auto b = with_bias ? rng.uniform_vec(static_cast<size_t>(C)) : std::vector<float>{};
        std::vector<double> want_mean, want_rstd;
        const auto want = ref_layernorm(testing::to_double(x), testing::to_double(w),
                                        testing::to_double(b), N, C, eps, &want_mean, &want_rstd);
        auto out = nan_vec(x.size()), mean = nan_vec(static_cast<size_t>(N)),
             rstd = nan_vec(static_cast<size_t>(N));
        layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(),
                          with_bias ? b.data() : nullptr, N, C, eps);
        const std::string what = "N=" + std::to_string(N) + " C=" + std::to_string(C) +
                                 (with_bias ? " bias" : " no bias");
        // x ~ 100 with spread 3: float rounding of x - mean is ~1e-5 relative to the spread.
        expect_close(out, want, 1e-4, 1e-4, "out " + what);
        expect_close(mean, want_mean, 0, 1e-6, "mean " + what);
        if (C > 1) expect_close(rstd, want_rstd, 0, 1e-4, "rstd " + what);
      }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(2);
  const float eps = 1e-5f;
  for (int64_t N : {1, 3})
    for (int64_t C : {1, 7, 33}) {
      const auto x = rng.uniform_vec(static_cast<size_t>(N * C), -2, 2);
      const auto w = rng.uniform_vec(static_cast<size_t>(C), 0.5, 1.5);
      const auto b = rng.uniform_vec(static_cast<size_t>(C));
      const auto dy = rng.uniform_vec(static_cast<size_t>(N * C));
      const auto xd = testing::to_double(x), wd = testing::to_double(w), bd = testing::to_double(b),
                 dyd = testing::to_double(dy);
      auto loss_x = [&](const std::vector<double>& v) {
        return testing::weighted_sum(ref_layernorm(v, wd, bd, N, C, eps), dyd);
      };
      auto loss_w = [&](const std::vector<double>& v) {
        return testing::weighted_sum(ref_layernorm(xd, v, bd, N, C, eps), dyd);
      };
      auto loss_b = [&](const std::vector<double>& v) {
        return testing::weighted_sum(ref_layernorm(xd, wd, v, N, C, eps), dyd);
      };
      std::vector<float> out(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
      layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C,
                        eps);
      const auto dx0 = rng.uniform_vec(x.size()), dw0 = rng.uniform_vec(w.size()),
                 db0 = rng.uniform_vec(b.size());
      auto dx = dx0, dw = dw0, db = db0;
      layernorm_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(),
                         mean.data(), rstd.data(), N, C);
      const std::string what = "N=" + std::to_string(N) + " C=" + std::to_string(C);
      // C=1 normalises to exactly 0 with rstd = 1/sqrt(eps): d_inp is tiny but its scale is huge.
      const double atol = C == 1 ? 1e-2 : 1e-5;
      expect_close(dx, testing::plus(dx0, testing::numeric_grad(loss_x, xd)), atol, 1e-4,
                   "d_inp " + what);
      expect_close(dw, testing::plus(dw0, testing::numeric_grad(loss_w, wd)), 1e-5, 1e-4,
                   "d_weight " + what);
      expect_close(db, testing::plus(db0, testing::numeric_grad(loss_b, bd)), 1e-5, 1e-4,
                   "d_bias " + what);
    }
}

TEST(LayerNorm, NullGradientsAreSkipped) {
  TP_SEED_TRACE();
  Rng rng(3);
  const int64_t N = 7, C = 33;
  const auto x = rng.uniform_vec(static_cast<size_t>(N * C));
  const auto w = rng.uniform_vec(static_cast<size_t>(C));
  const auto dy = rng.uniform_vec(static_cast<size_t>(N * C));
  std::vector<float> out(x.size()), mean(static_cast<size_t>(N)), rstd(static_cast<size_t>(N));
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), nullptr, N, C, 1e-5f);
  std::vector<float> db_all(static_cast<size_t>(C), 0.0f), db_only(static_cast<size_t>(C), 0.0f),
      dw(static_cast<size_t>(C), 0.0f), dx(x.size(), 0.0f);
  layernorm_backward(dx.data(), dw.data(), db_all.data(), dy.data(), x.data(), w.data(),
                     mean.data(), rstd.data(), N, C);
  layernorm_backward(nullptr, nullptr, db_only.data(), dy.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  expect_close(db_only, db_all, 0, 0, "d_bias alone");
}

}  // namespace
}  // namespace tensorpar

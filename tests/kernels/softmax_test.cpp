// Softmax over the last dim: forward against a double-precision formula (with large logits, to
// exercise the max subtraction), backward against finite differences.
#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::nan_vec;
using testing::Rng;

std::vector<double> ref_softmax(const std::vector<double>& x, int64_t N, int64_t C) {
  std::vector<double> out(x.size());
  for (int64_t n = 0; n < N; ++n) {
    const double* r = x.data() + n * C;
    const double m = *std::max_element(r, r + C);
    double s = 0;
    for (int64_t c = 0; c < C; ++c) s += std::exp(r[c] - m);
    for (int64_t c = 0; c < C; ++c) out[static_cast<size_t>(n * C + c)] = std::exp(r[c] - m) / s;
  }
  return out;
}

TEST(Softmax, ForwardMatchesDoubleFormula) {
  TP_SEED_TRACE();
  Rng rng(1);
  for (int64_t N : {1, 7, 33, 577})
    for (int64_t C : {1, 7, 33, 577}) {
      auto x = rng.uniform_vec(static_cast<size_t>(N * C), -10, 10);
      for (int64_t n = 0; n < N; n += 2)  // some rows far from zero: exp would overflow unshifted
        for (int64_t c = 0; c < C; ++c) x[static_cast<size_t>(n * C + c)] += 500;
      const auto want = ref_softmax(testing::to_double(x), N, C);
      auto out = nan_vec(x.size());
      softmax_forward(out.data(), x.data(), N, C);
      expect_close(out, want, 1e-7, 1e-5, "N=" + std::to_string(N) + " C=" + std::to_string(C));
    }
}

TEST(Softmax, BackwardMatchesFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(2);
  for (int64_t C : {1, 7, 33}) {
    const int64_t N = 3;
    const auto x = rng.uniform_vec(static_cast<size_t>(N * C), -3, 3);
    const auto dy = rng.uniform_vec(x.size());
    const auto want = testing::numeric_grad(
        [&](const std::vector<double>& v) {
          return testing::weighted_sum(ref_softmax(v, N, C), testing::to_double(dy));
        },
        testing::to_double(x));
    std::vector<float> y(x.size());
    softmax_forward(y.data(), x.data(), N, C);
    const auto d0 = rng.uniform_vec(x.size());
    auto dx = d0;
    softmax_backward(dx.data(), dy.data(), y.data(), N, C);
    expect_close(dx, testing::plus(d0, want), 1e-6, 1e-4, "C=" + std::to_string(C));
  }
}

}  // namespace
}  // namespace tensorpar

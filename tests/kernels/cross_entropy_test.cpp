// Fused softmax + cross-entropy: forward against a double-precision formula (ignore index,
// label smoothing, large logits), backward against finite differences of the mean loss, and
// the vocab-parallel composition of the row-wise pieces against the fused version.
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::nan_vec;
using testing::Rng;

constexpr int64_t kIgnore = -100;

// Per-row losses in double (0 for ignored rows); returns the mean over non-ignored rows.
double ref_cross_entropy(const std::vector<double>& x, const std::vector<int64_t>& targets,
                         int64_t N, int64_t V, double smoothing, std::vector<double>* losses) {
  double total = 0;
  int64_t count = 0;
  if (losses) losses->assign(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[static_cast<size_t>(n)];
    if (t == kIgnore) continue;
    const double* r = x.data() + n * V;
    const double m = *std::max_element(r, r + V);
    double s = 0;
    for (int64_t j = 0; j < V; ++j) s += std::exp(r[j] - m);
    const double lse = m + std::log(s);
    // -sum_j q_j log p_j with q = (1 - e) onehot + e / V.
    double loss = 0;
    for (int64_t j = 0; j < V; ++j) {
      const double q = (j == t ? 1 - smoothing : 0) + smoothing / static_cast<double>(V);
      loss -= q * (r[j] - lse);
    }
    if (losses) (*losses)[static_cast<size_t>(n)] = loss;
    total += loss;
    ++count;
  }
  return count ? total / static_cast<double>(count) : 0.0;
}

std::vector<int64_t> random_targets(Rng& rng, int64_t N, int64_t V) {
  std::vector<int64_t> t(static_cast<size_t>(N));
  for (auto& x : t) x = rng.integer(0, 4) == 0 ? kIgnore : rng.integer(0, V);
  if (N > 0) t[0] = rng.integer(0, V);  // at least one counted row
  return t;
}

TEST(CrossEntropy, ForwardMatchesDoubleFormula) {
  TP_SEED_TRACE();
  Rng rng(1);
  for (float smoothing : {0.0f, 0.1f})
    for (int64_t N : {1, 7, 33})
      for (int64_t V : {1, 7, 33, 577}) {
        auto x = rng.uniform_vec(static_cast<size_t>(N * V), -8, 8);
        for (int64_t j = 0; j < V; ++j) x[static_cast<size_t>(j)] += 300;  // row 0: large logits
        const auto targets = random_targets(rng, N, V);
        std::vector<double> want_losses;
        const double want =
            ref_cross_entropy(testing::to_double(x), targets, N, V, smoothing, &want_losses);
        auto losses = nan_vec(static_cast<size_t>(N)), lse = nan_vec(static_cast<size_t>(N));
        CrossEntropyOptions opt;
        opt.label_smoothing = smoothing;
        const float mean =
            cross_entropy_forward(losses.data(), lse.data(), x.data(), targets.data(), N, V, opt);
        const std::string what = "N=" + std::to_string(N) + " V=" + std::to_string(V) +
                                 " smoothing=" + std::to_string(smoothing);
        // Logits of ~300 in float carry absolute rounding ~3e-5 into lse - x_t.
        expect_close(losses, want_losses, 1e-4, 1e-5, "losses " + what);
        EXPECT_NEAR(mean, want, 1e-4 + 1e-5 * std::fabs(want)) << what;
        // Evaluation only (no backward): nothing saved.
        EXPECT_EQ(cross_entropy_forward(nullptr, nullptr, x.data(), targets.data(), N, V, opt),
                  mean)
            << what;
      }
}

TEST(CrossEntropy, BackwardMatchesFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(2);
  for (float smoothing : {0.0f, 0.2f})
    for (int64_t V : {1, 7, 33}) {
      const int64_t N = 5;
      const auto x = rng.uniform_vec(static_cast<size_t>(N * V), -4, 4);
      const auto targets = random_targets(rng, N, V);
      const float d_loss = rng.uniform(0.5f, 2.0f);
      const auto want = testing::numeric_grad(
          [&](const std::vector<double>& v) {
            return d_loss * ref_cross_entropy(v, targets, N, V, smoothing, nullptr);
          },
          testing::to_double(x));
      CrossEntropyOptions opt;
      opt.label_smoothing = smoothing;
      std::vector<float> lse(static_cast<size_t>(N));
      cross_entropy_forward(nullptr, lse.data(), x.data(), targets.data(), N, V, opt);
      const auto d0 = rng.uniform_vec(x.size());
      auto dx = d0;
      cross_entropy_backward(dx.data(), d_loss, x.data(), lse.data(), targets.data(), N, V, opt);
      expect_close(dx, testing::plus(d0, want), 1e-6, 1e-4,
                   "V=" + std::to_string(V) + " smoothing=" + std::to_string(smoothing));
    }
}

TEST(CrossEntropy, AllIgnoredGivesZeroLossAndNoGradient) {
  const int64_t N = 3, V = 4;
  std::vector<float> x(static_cast<size_t>(N * V), 1.0f), lse(static_cast<size_t>(N)),
      losses(static_cast<size_t>(N));
  const std::vector<int64_t> targets(static_cast<size_t>(N), kIgnore);
  EXPECT_EQ(cross_entropy_forward(losses.data(), lse.data(), x.data(), targets.data(), N, V), 0.0f);
  for (float l : losses) EXPECT_EQ(l, 0.0f);
  std::vector<float> dx(x.size(), 0.5f);
  cross_entropy_backward(dx.data(), 1.0f, x.data(), lse.data(), targets.data(), N, V);
  for (float g : dx) EXPECT_EQ(g, 0.5f);
}

TEST(CrossEntropy, BadTargetsAreErrors) {
  const int64_t N = 2, V = 4;
  std::vector<float> x(static_cast<size_t>(N * V), 1.0f), lse(static_cast<size_t>(N));
  const std::vector<int64_t> targets = {0, 4};
  testing::expect_error_with(
      [&] { cross_entropy_forward(nullptr, lse.data(), x.data(), targets.data(), N, V); },
      {"[cross_entropy_forward]", "got 4", "row 1"});
}

// Vocab split into uneven shards; the all-reduces are simulated by hand.
TEST(CrossEntropy, VocabParallelPiecesMatchFused) {
  TP_SEED_TRACE();
  Rng rng(3);
  for (float smoothing : {0.0f, 0.1f}) {
    const int64_t N = 33, V = 577;
    const std::vector<int64_t> bounds = {0, 200, 200, 201,
                                         577};  // one empty shard, one of a single column
    const auto x = rng.uniform_vec(static_cast<size_t>(N * V), -6, 6);
    const auto targets = random_targets(rng, N, V);
    CrossEntropyOptions opt;
    opt.label_smoothing = smoothing;
    std::vector<float> losses(static_cast<size_t>(N)), lse(static_cast<size_t>(N));
    const float mean =
        cross_entropy_forward(losses.data(), lse.data(), x.data(), targets.data(), N, V, opt);
    const float d_loss = 1.5f;
    std::vector<float> dx(x.size(), 0.0f);
    cross_entropy_backward(dx.data(), d_loss, x.data(), lse.data(), targets.data(), N, V, opt);

    const size_t shards = bounds.size() - 1;
    std::vector<std::vector<float>> local(shards);  // (N, V_local) per shard
    for (size_t s = 0; s < shards; ++s)
      for (int64_t n = 0; n < N; ++n)
        local[s].insert(local[s].end(), x.begin() + n * V + bounds[s],
                        x.begin() + n * V + bounds[s + 1]);
    auto width = [&](size_t s) { return bounds[s + 1] - bounds[s]; };
    const size_t n = static_cast<size_t>(N);
    std::vector<float> gmax(n, -INFINITY), gsum(n, 0), gtarget(n, 0), glogits(n, 0);
    for (size_t s = 0; s < shards; ++s) {  // all-reduce MAX
      auto m = nan_vec(n);
      cross_entropy_local_max(m.data(), local[s].data(), N, width(s));
      for (size_t i = 0; i < n; ++i) gmax[i] = std::max(gmax[i], m[i]);
    }
    for (size_t s = 0; s < shards; ++s) {  // all-reduce SUM of the three pieces
      auto e = nan_vec(n), t = nan_vec(n), l = nan_vec(n);
      cross_entropy_local_sum_exp(e.data(), local[s].data(), gmax.data(), N, width(s));
      cross_entropy_local_target_logit(t.data(), l.data(), local[s].data(), targets.data(), N,
                                       bounds[s], width(s), V, opt);
      for (size_t i = 0; i < n; ++i) {
        gsum[i] += e[i];
        gtarget[i] += t[i];
        glogits[i] += l[i];
      }
    }
    auto p_losses = nan_vec(n), p_lse = nan_vec(n);
    const float p_mean =
        cross_entropy_loss_from_parts(p_losses.data(), p_lse.data(), gmax.data(), gsum.data(),
                                      gtarget.data(), glogits.data(), targets.data(), N, V, opt);
    EXPECT_NEAR(p_mean, mean, 1e-5 * std::fabs(mean));
    expect_close(p_losses, losses, 1e-5, 1e-5, "losses from parts");
    expect_close(p_lse, lse, 1e-5, 1e-6, "lse from parts");
    const float scale =
        d_loss / static_cast<float>(cross_entropy_count(targets.data(), N, kIgnore));
    for (size_t s = 0; s < shards; ++s) {
      std::vector<float> d_local(local[s].size(), 0.0f), want;
      cross_entropy_grad_local(d_local.data(), local[s].data(), p_lse.data(), targets.data(), scale,
                               N, bounds[s], width(s), V, opt);
      for (int64_t r = 0; r < N; ++r)
        want.insert(want.end(), dx.begin() + r * V + bounds[s], dx.begin() + r * V + bounds[s + 1]);
      expect_close(d_local, want, 1e-7, 1e-5, "d_logits of shard " + std::to_string(s));
    }
  }
}

}  // namespace
}  // namespace tensorpar

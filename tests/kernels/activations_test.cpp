// GELU (tanh and erf), SiLU and SwiGLU: forward against double-precision formulas over a wide
// range (including large |x|), backward against finite differences of those formulas.
#include "kernels/cpu/activations.h"

#include <cmath>
#include <numbers>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::nan_vec;
using testing::Rng;

double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x)));
}
double gelu_erf(double x) {
  return 0.5 * x * (1 + std::erf(x / std::numbers::sqrt2));
}
double silu(double x) {
  return x / (1 + std::exp(-x));
}

std::vector<float> inputs(Rng& rng, int64_t N) {
  auto x = rng.uniform_vec(static_cast<size_t>(N), -6, 6);
  const float extremes[] = {-100.0f, -20.0f, 0.0f, 20.0f, 100.0f};
  for (size_t i = 0; i < 5 && i < x.size(); ++i) x[i] = extremes[i];
  return x;
}

using Forward = void (*)(float*, const float*, int64_t);
using Backward = void (*)(float*, const float*, const float*, int64_t);

struct Unary {
  const char* name;
  Forward fwd;
  Backward bwd;
  double (*ref)(double);
};

const Unary kUnary[] = {
    {"gelu_tanh", gelu_tanh_forward, gelu_tanh_backward, gelu_tanh},
    {"gelu_erf", gelu_erf_forward, gelu_erf_backward, gelu_erf},
    {"silu", silu_forward, silu_backward, silu},
};

TEST(Activations, UnaryForwardMatchesDoubleFormula) {
  TP_SEED_TRACE();
  Rng rng(1);
  for (const auto& u : kUnary)
    for (int64_t N : {1, 7, 33, 577, 10007}) {
      const auto x = inputs(rng, N);
      std::vector<double> want(x.size());
      for (size_t i = 0; i < x.size(); ++i) want[i] = u.ref(x[i]);
      auto out = nan_vec(x.size());
      u.fwd(out.data(), x.data(), N);
      expect_close(out, want, 1e-6, 1e-5, std::string(u.name) + " N=" + std::to_string(N));
    }
}

TEST(Activations, UnaryBackwardMatchesFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(2);
  for (const auto& u : kUnary)
    for (int64_t N : {1, 7, 33}) {
      const auto x = inputs(rng, N);
      const auto dy = rng.uniform_vec(x.size());
      // Element-wise: the derivative of each element by central differences.
      std::vector<double> want(x.size());
      const double h = 1e-5;
      for (size_t i = 0; i < x.size(); ++i)
        want[i] = (u.ref(x[i] + h) - u.ref(x[i] - h)) / (2 * h) * dy[i];
      const auto d0 = rng.uniform_vec(x.size());
      auto dx = d0;
      u.bwd(dx.data(), dy.data(), x.data(), N);
      expect_close(dx, testing::plus(d0, want), 1e-5, 1e-4,
                   std::string(u.name) + " N=" + std::to_string(N));
    }
}

TEST(Activations, SwigluForwardAndBackward) {
  TP_SEED_TRACE();
  Rng rng(3);
  for (int64_t N : {1, 7, 33, 577}) {
    const auto gate = inputs(rng, N);
    const auto up = rng.uniform_vec(static_cast<size_t>(N), -3, 3);
    std::vector<double> want(gate.size());
    for (size_t i = 0; i < gate.size(); ++i) want[i] = silu(gate[i]) * up[i];
    auto out = nan_vec(gate.size());
    swiglu_forward(out.data(), gate.data(), up.data(), N);
    const std::string what = "N=" + std::to_string(N);
    expect_close(out, want, 1e-6, 1e-5, "swiglu out " + what);

    const auto dy = rng.uniform_vec(gate.size());
    const auto dy_d = testing::to_double(dy), up_d = testing::to_double(up),
               gate_d = testing::to_double(gate);
    auto loss_gate = [&](const std::vector<double>& g) {
      double s = 0;
      for (size_t i = 0; i < g.size(); ++i) s += silu(g[i]) * up_d[i] * dy_d[i];
      return s;
    };
    auto loss_up = [&](const std::vector<double>& u) {
      double s = 0;
      for (size_t i = 0; i < u.size(); ++i) s += silu(gate_d[i]) * u[i] * dy_d[i];
      return s;
    };
    if (N > 33) continue;  // finite differences are O(N^2) here
    const auto dg0 = rng.uniform_vec(gate.size()), du0 = rng.uniform_vec(gate.size());
    auto dg = dg0, du = du0;
    swiglu_backward(dg.data(), du.data(), dy.data(), gate.data(), up.data(), N);
    expect_close(dg, testing::plus(dg0, testing::numeric_grad(loss_gate, gate_d)), 1e-5, 1e-4,
                 "d_gate " + what);
    expect_close(du, testing::plus(du0, testing::numeric_grad(loss_up, up_d)), 1e-5, 1e-4,
                 "d_up " + what);
  }
}

// The fused-rows form: gate and up interleaved per row as (rows, [gate F | up F]).
TEST(Activations, SwigluRowsMatchTheFormulaOnFusedRows) {
  TP_SEED_TRACE();
  Rng rng(4);
  for (const auto& [rows, F] : {std::pair<int64_t, int64_t>{1, 9}, {3, 5}, {40, 1000}}) {
    const auto gu = rng.uniform_vec(size_t(rows * 2 * F), -4, 4);
    const auto dy = rng.uniform_vec(size_t(rows * F));
    std::vector<double> want(size_t(rows * F)), want_dgu(gu.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < F; ++i) {
        const double g = gu[size_t(r * 2 * F + i)], u = gu[size_t(r * 2 * F + F + i)];
        const double s = 1.0 / (1.0 + std::exp(-g)), d = dy[size_t(r * F + i)];
        want[size_t(r * F + i)] = g * s * u;
        want_dgu[size_t(r * 2 * F + i)] = 1.0 + s * (1.0 + g * (1.0 - s)) * u * d;  // starts at 1
        want_dgu[size_t(r * 2 * F + F + i)] = 1.0 + g * s * d;
      }
    auto out = nan_vec(size_t(rows * F));
    swiglu_rows_forward(out.data(), gu.data(), rows, F);
    const std::string what = "rows=" + std::to_string(rows) + " F=" + std::to_string(F);
    expect_close(out, want, 1e-6, 1e-5, "swiglu rows out " + what);
    std::vector<float> dgu(gu.size(), 1.0f);
    swiglu_rows_backward(dgu.data(), dy.data(), gu.data(), rows, F);
    expect_close(dgu, want_dgu, 1e-5, 1e-4, "swiglu rows d_gate_up " + what);
  }
}

// GeGLU (Gemma): gelu_tanh(gate) * up on fused rows, against the tanh formula in double and
// its finite-difference gradient.
TEST(Activations, GegluRowsMatchTheTanhFormulaAndFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(5);
  auto gelu = [](double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); };
  for (const auto& [rows, F] : {std::pair<int64_t, int64_t>{1, 9}, {3, 5}, {40, 1000}}) {
    const auto gu = rng.uniform_vec(size_t(rows * 2 * F), -4, 4);
    const auto dy = rng.uniform_vec(size_t(rows * F));
    const auto gud = testing::to_double(gu), dyd = testing::to_double(dy);
    auto ref = [&](const std::vector<double>& x) {
      std::vector<double> out(size_t(rows * F));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < F; ++i)
          out[size_t(r * F + i)] = gelu(x[size_t(r * 2 * F + i)]) * x[size_t(r * 2 * F + F + i)];
      return out;
    };
    const std::string what = "rows=" + std::to_string(rows) + " F=" + std::to_string(F);
    auto out = nan_vec(size_t(rows * F));
    geglu_rows_forward(out.data(), gu.data(), rows, F);
    expect_close(out, ref(gud), 1e-6, 1e-5, "geglu rows out " + what);
    if (rows * F > 64) continue;  // finite differences are O(N^2)
    const auto want = testing::numeric_grad([&](const std::vector<double>& x) { return testing::weighted_sum(ref(x), dyd); }, gud);
    const auto dgu0 = rng.uniform_vec(gu.size());
    auto dgu = dgu0;
    geglu_rows_backward(dgu.data(), dy.data(), gu.data(), rows, F);
    expect_close(dgu, testing::plus(dgu0, want), 1e-5, 1e-4, "geglu rows d_gate_up " + what);
  }
}

}  // namespace
}  // namespace tensorpar

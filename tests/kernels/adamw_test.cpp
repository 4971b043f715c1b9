// AdamW: several steps against a double-precision transcription of the algorithm (PyTorch's
// AdamW: decoupled weight decay, bias correction with the step count).
#include "kernels/cpu/adamw.h"

#include <cmath>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::Rng;

TEST(AdamW, StepsMatchDoubleFormula) {
  TP_SEED_TRACE();
  Rng rng(1);
  AdamWConfig cfg;
  cfg.lr = 1e-2f;
  cfg.beta1 = 0.9f;
  cfg.beta2 = 0.95f;
  cfg.eps = 1e-8f;
  cfg.weight_decay = 0.1f;
  for (int64_t n : {1, 7, 33, 577, 100003}) {
    auto p = rng.uniform_vec(static_cast<size_t>(n));
    std::vector<float> m(p.size(), 0.0f), v(p.size(), 0.0f);
    std::vector<double> pd = testing::to_double(p), md(p.size(), 0.0), vd(p.size(), 0.0);
    for (int64_t t = 1; t <= 5; ++t) {
      const auto g = rng.uniform_vec(p.size(), -2, 2);
      adamw_step(p.data(), m.data(), v.data(), g.data(), n, t, cfg);
      const double b1 = cfg.beta1, b2 = cfg.beta2;
      for (size_t i = 0; i < p.size(); ++i) {
        pd[i] -= double(cfg.lr) * double(cfg.weight_decay) * pd[i];  // decoupled decay first
        md[i] = b1 * md[i] + (1 - b1) * g[i];
        vd[i] = b2 * vd[i] + (1 - b2) * double(g[i]) * g[i];
        const double mhat = md[i] / (1 - std::pow(b1, double(t)));
        const double vhat = vd[i] / (1 - std::pow(b2, double(t)));
        pd[i] -= double(cfg.lr) * mhat / (std::sqrt(vhat) + double(cfg.eps));
      }
      const std::string what = "n=" + std::to_string(n) + " t=" + std::to_string(t);
      expect_close(m, md, 1e-6, 1e-5, "m " + what);
      expect_close(v, vd, 1e-6, 1e-5, "v " + what);
      expect_close(p, pd, 1e-6, 1e-5, "params " + what);
    }
  }
}

TEST(AdamW, BadArgumentsAreErrors) {
  float p = 1, m = 0, v = 0, g = 1;
  AdamWConfig cfg;
  EXPECT_THROW(adamw_step(&p, &m, &v, &g, 1, 0, cfg), Error);
  cfg.beta2 = 1.0f;
  EXPECT_THROW(adamw_step(&p, &m, &v, &g, 1, 1, cfg), Error);
}

}  // namespace
}  // namespace tensorpar

// AdamW step, parallel and vectorised over elements (compiled for AVX-512, AVX2 and the
// baseline, picked at run time; the AVX clones may fuse a multiply and an add, so the last bits
// of an update can differ between machines, never between runs on one); the bias corrections
// are computed once in double.
#include "kernels/cpu/adamw.h"

#include <cmath>

#include "core/error.h"
#include "kernels/cpu/fast_math.h"

namespace tensorpar {
namespace {

// Below this many elements of work a loop runs on the calling thread: waking a team costs
// more than it saves (decode steps, small test sizes).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

}  // namespace

TP_VECTOR_CLONES void adamw_step(float* params, float* m, float* v, const float* grads, int64_t n,
                                 int64_t t, const AdamWConfig& cfg) {
  TP_CHECK(n >= 0, "[adamw_step] size: got n=", n, ", expected >= 0");
  TP_CHECK(t >= 1, "[adamw_step] step: got t=", t, ", expected >= 1");
  TP_CHECK(cfg.beta1 >= 0 && cfg.beta1 < 1 && cfg.beta2 >= 0 && cfg.beta2 < 1,
           "[adamw_step] betas: got (", cfg.beta1, ", ", cfg.beta2, "), expected in [0, 1)");
  const float b1 = cfg.beta1, b2 = cfg.beta2, lr = cfg.lr, wd = cfg.weight_decay, eps = cfg.eps;
  const double t_d = static_cast<double>(t);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b1), t_d)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(b2), t_d)));
#pragma omp parallel for simd schedule(static) if (n > kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i];
    const float mi = b1 * m[i] + (1 - b1) * g;
    const float vi = b2 * v[i] + (1 - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    params[i] -= lr * (mi * c1 / (std::sqrt(vi * c2) + eps) + wd * params[i]);
  }
}

}  // namespace tensorpar

// Cross-entropy from row-wise pieces (max, sum of exp, target logit), so the fused version on
// one rank and the vocab-parallel one share the same code; parallel over rows.
#include "kernels/cpu/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/fast_math.h"

namespace tensorpar {
namespace {

// Below this many elements of work a loop runs on the calling thread: waking a team costs
// more than it saves (decode steps, small test sizes).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

void check_sizes(const char* where, int64_t N, int64_t v_begin, int64_t V_local, int64_t V_global) {
  // V_local = 0 is allowed: a rank may own no vocab columns (it then contributes the identity
  // of each reduction: -inf to the max, 0 to the sums).
  TP_CHECK(N >= 0 && V_local >= 0 && V_global > 0 && v_begin >= 0 && v_begin + V_local <= V_global,
           "[", where, "] sizes: got N=", N, " v_begin=", v_begin, " V_local=", V_local,
           " V_global=", V_global,
           ", expected N >= 0, V_global > 0, [v_begin, v_begin+V_local) "
           "inside [0, V_global)");
}

void check_targets(const char* where, const int64_t* targets, int64_t N, int64_t V,
                   int64_t ignore_index) {
  for (int64_t n = 0; n < N; ++n)
    TP_CHECK(targets[n] == ignore_index || (targets[n] >= 0 && targets[n] < V), "[", where,
             "] target: got ", targets[n], " at row ", n, ", expected in [0, ", V,
             ") or the ignore index ", ignore_index);
}

}  // namespace

int64_t cross_entropy_count(const int64_t* targets, int64_t N, int64_t ignore_index) {
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) count += targets[n] != ignore_index;
  return count;
}

void cross_entropy_local_max(float* row_max_out, const float* logits_local, int64_t N,
                             int64_t V_local) {
  check_sizes("cross_entropy_local_max", N, 0, V_local, std::max<int64_t>(V_local, 1));
#pragma omp parallel for schedule(static) if (N * V_local > kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    row_max_out[n] = row_max(logits_local + n * V_local, V_local);
  }
}

void cross_entropy_local_sum_exp(float* row_sum_exp, const float* logits_local,
                                 const float* row_max, int64_t N, int64_t V_local) {
  check_sizes("cross_entropy_local_sum_exp", N, 0, V_local, std::max<int64_t>(V_local, 1));
#pragma omp parallel for schedule(static) if (N * V_local > kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    row_sum_exp[n] = static_cast<float>(exp_sum(logits_local + n * V_local, row_max[n], V_local));
  }
}

void cross_entropy_local_target_logit(float* target_logit, float* logit_sum,
                                      const float* logits_local, const int64_t* targets, int64_t N,
                                      int64_t v_begin, int64_t V_local, int64_t V_global,
                                      const CrossEntropyOptions& opt) {
  check_sizes("cross_entropy_local_target_logit", N, v_begin, V_local, V_global);
  check_targets("cross_entropy_local_target_logit", targets, N, V_global, opt.ignore_index);
#pragma omp parallel for schedule(static) if (N * V_local > kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    const float* x = logits_local + n * V_local;
    const int64_t t = targets[n];
    target_logit[n] =
        (t != opt.ignore_index && t >= v_begin && t < v_begin + V_local) ? x[t - v_begin] : 0.0f;
    if (logit_sum) {
      double s = 0;
      for (int64_t j = 0; j < V_local; ++j) s += x[j];
      logit_sum[n] = static_cast<float>(s);
    }
  }
}

float cross_entropy_loss_from_parts(float* losses, float* lse, const float* row_max,
                                    const float* row_sum_exp, const float* target_logit,
                                    const float* logit_sum, const int64_t* targets, int64_t N,
                                    int64_t V_global, const CrossEntropyOptions& opt) {
  TP_CHECK(N >= 0 && V_global > 0, "[cross_entropy_loss_from_parts] sizes: got N=", N,
           " V=", V_global, ", expected N >= 0 and V > 0");
  const double eps = opt.label_smoothing;
  TP_CHECK(eps >= 0 && eps <= 1, "[cross_entropy_loss_from_parts] label_smoothing: got ", eps,
           ", expected in [0, 1]");
  TP_CHECK(eps == 0 || logit_sum != nullptr,
           "[cross_entropy_loss_from_parts] logit_sum: got nullptr, expected the row sums of "
           "the logits when label_smoothing > 0");
  double total = 0;
  int64_t count = 0;
  for (int64_t n = 0; n < N; ++n) {  // serial: cheap, and a fixed summation order
    const double l =
        static_cast<double>(row_max[n]) + std::log(static_cast<double>(row_sum_exp[n]));
    if (lse) lse[n] = static_cast<float>(l);
    double loss = 0;
    if (targets[n] != opt.ignore_index) {
      loss = (1 - eps) * (l - target_logit[n]);
      if (eps > 0)
        loss += eps * (l - static_cast<double>(logit_sum[n]) / static_cast<double>(V_global));
      total += loss;
      ++count;
    }
    if (losses) losses[n] = static_cast<float>(loss);
  }
  return count > 0 ? static_cast<float>(total / static_cast<double>(count)) : 0.0f;
}

void cross_entropy_grad_local(float* d_logits_local, const float* logits_local, const float* lse,
                              const int64_t* targets, float scale, int64_t N, int64_t v_begin,
                              int64_t V_local, int64_t V_global, const CrossEntropyOptions& opt) {
  check_sizes("cross_entropy_grad_local", N, v_begin, V_local, V_global);
  check_targets("cross_entropy_grad_local", targets, N, V_global, opt.ignore_index);
  const float eps = opt.label_smoothing;
  const float smooth = eps / static_cast<float>(V_global) * scale;
#pragma omp parallel for schedule(static) if (N * V_local > kMinParallelWork)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t = targets[n];
    if (t == opt.ignore_index) continue;
    const float* x = logits_local + n * V_local;
    float* dx = d_logits_local + n * V_local;
    const float l = lse[n];
    add_scaled_exp(dx, x, l, scale, -smooth, V_local);
    if (t >= v_begin && t < v_begin + V_local) dx[t - v_begin] -= (1 - eps) * scale;
  }
}

float cross_entropy_forward(float* losses, float* lse, const float* logits, const int64_t* targets,
                            int64_t N, int64_t V, const CrossEntropyOptions& opt) {
  check_sizes("cross_entropy_forward", N, 0, V, V);
  check_targets("cross_entropy_forward", targets, N, V, opt.ignore_index);
  std::vector<float> row_max(static_cast<size_t>(N)), row_sum(static_cast<size_t>(N)),
      target_logit(static_cast<size_t>(N)), logit_sum;
  if (opt.label_smoothing > 0) logit_sum.resize(static_cast<size_t>(N));
  cross_entropy_local_max(row_max.data(), logits, N, V);
  cross_entropy_local_sum_exp(row_sum.data(), logits, row_max.data(), N, V);
  cross_entropy_local_target_logit(target_logit.data(),
                                   logit_sum.empty() ? nullptr : logit_sum.data(), logits, targets,
                                   N, 0, V, V, opt);
  return cross_entropy_loss_from_parts(
      losses, lse, row_max.data(), row_sum.data(), target_logit.data(),
      logit_sum.empty() ? nullptr : logit_sum.data(), targets, N, V, opt);
}

void cross_entropy_backward(float* d_logits, float d_loss, const float* logits, const float* lse,
                            const int64_t* targets, int64_t N, int64_t V,
                            const CrossEntropyOptions& opt) {
  const int64_t count = cross_entropy_count(targets, N, opt.ignore_index);
  if (count == 0) return;
  cross_entropy_grad_local(d_logits, logits, lse, targets, d_loss / static_cast<float>(count), N, 0,
                           V, V, opt);
}

}  // namespace tensorpar

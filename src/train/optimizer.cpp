// AdamW over parameter shards, the LR schedule, and TP-global gradient clipping.
#include "train/optimizer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/sum_squares.h"

namespace tensorpar {

AdamWState& AdamW::state(const ParamShard& p) {
  auto it = state_.find(p.name);
  if (it == state_.end()) {
    AdamWState s{Tensor::zeros(p.value->shape(), DType::kF32),
                 Tensor::zeros(p.value->shape(), DType::kF32)};
    it = state_.emplace(p.name, std::move(s)).first;
  }
  TP_CHECK(it->second.exp_avg.shape() == p.value->shape(), "[AdamW] state of '", p.name, "' is ",
           it->second.exp_avg.describe(), ", expected the parameter's shape ", p.value->describe());
  return it->second;
}

void AdamW::step(const std::vector<ParamShard>& params, float lr) {
  ++steps_;
  AdamWConfig cfg = config_;
  cfg.lr = lr;
  for (const ParamShard& p : params) {
    if (!p.grad || p.value->numel() == 0) continue;
    TP_CHECK(p.value->dtype() == DType::kF32 && p.value->is_contiguous(), "[AdamW] parameter '",
             p.name, "' is ", p.value->describe(), ", expected contiguous f32 master weights");
    TP_CHECK(p.grad->shape() == p.value->shape() && p.grad->dtype() == DType::kF32,
             "[AdamW] gradient of '", p.name, "' is ", p.grad->describe(), ", expected f32 ",
             p.value->describe());
    AdamWState& s = state(p);
    adamw_step(p.value->data<float>(), s.exp_avg.data<float>(), s.exp_avg_sq.data<float>(),
               p.grad->data<float>(), p.value->numel(), steps_, cfg);
  }
}

float lr_at(int64_t step, float lr, int64_t warmup, int64_t total_steps, float min_lr) {
  if (warmup > 0 && step < warmup) return lr * float(step + 1) / float(warmup);
  if (total_steps <= warmup) return lr;
  const double progress = std::min(1.0, double(step - warmup) / double(total_steps - warmup));
  return min_lr + float(0.5 * (1.0 + std::cos(M_PI * progress))) * (lr - min_lr);
}

double global_grad_norm(const std::vector<ParamShard>& params, Communicator& tp, Communicator* pp,
                        Communicator* ep) {
  double local[2] = {0, 0};  // the shards every EP rank holds alike, and the experts' (differ over EP)
  for (const ParamShard& p : params) {
    if (!p.grad || p.grad->numel() == 0) continue;
    const float* g = p.grad->data<float>();
    const double s = sum_of_squares(g, p.grad->numel());
    TP_CHECK(p.copies >= 1, "[global_grad_norm] '", p.name, "' has copies ", p.copies,
             ", expected >= 1");
    local[p.expert ? 1 : 0] += s / double(p.copies);
  }
  return combine_grad_norm(local, tp, pp, ep);
}

double combine_grad_norm(const double local[2], Communicator& tp, Communicator* pp, Communicator* ep) {
  // Gather the doubles bitwise (no f64 reduction dtype) and add in rank order on every rank.
  std::vector<double> all(size_t(2 * tp.size()));
  tp.all_gather(local, all.data(), int64_t(2 * sizeof(double)), DType::kU8);
  double dense = 0, experts = 0;
  for (int r = 0; r < tp.size(); ++r) dense += all[size_t(2 * r)], experts += all[size_t(2 * r + 1)];
  if (ep && ep->size() > 1) {
    std::vector<double> ranks(size_t(ep->size()));
    ep->all_gather(&experts, ranks.data(), int64_t(sizeof(double)), DType::kU8);
    experts = 0;
    for (double x : ranks) experts += x;
  }
  double total = dense + experts;
  if (pp && pp->size() > 1) {
    std::vector<double> stages(size_t(pp->size()));
    pp->all_gather(&total, stages.data(), int64_t(sizeof(double)), DType::kU8);
    total = 0;
    for (double x : stages) total += x;
  }
  return std::sqrt(total);
}

double clip_grad_norm(const std::vector<ParamShard>& params, Communicator& tp, double max_norm,
                      Communicator* pp, Communicator* ep) {
  const double norm = global_grad_norm(params, tp, pp, ep);
  if (max_norm > 0 && std::isfinite(norm) && norm > max_norm) {
    const float scale = float(max_norm / (norm + 1e-6));
    for (const ParamShard& p : params)
      if (p.grad) scale_array(p.grad->data<float>(), scale, p.grad->numel());
  }
  return norm;
}

}  // namespace tensorpar

// Norm (see norm.h).
#include "model/norm.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"
#include "parallel/slice_loader.h"

namespace tensorpar {

Norm::Norm(int64_t hidden, bool layer_norm, float eps, float weight_offset)
    : C_(hidden), layer_norm_(layer_norm), eps_(eps), offset_(weight_offset) {
  TP_CHECK(!layer_norm || weight_offset == 0.0f, "[Norm] a weight offset is for RMSNorm only");
  w_.value = Tensor::empty({C_}, DType::kF32);
  w_.value.fill(1.0f - weight_offset);  // a multiplier of 1
  if (layer_norm_) b_.value = Tensor::zeros({C_}, DType::kF32);
}

const float* Norm::scale_weights() const {
  if (offset_ == 0.0f) return w_.value.data<float>();
  offset_w_.resize(size_t(C_));
  const float* w = w_.value.data<float>();
  for (int64_t i = 0; i < C_; ++i) offset_w_[size_t(i)] = offset_ + w[i];
  return offset_w_.data();
}

int64_t Norm::weight_bytes() const { return w_.value.nbytes() + (layer_norm_ ? b_.value.nbytes() : 0); }

void Norm::forward(float* out, float* mean, float* rstd, const float* in, int64_t N) const {
  if (layer_norm_)
    layernorm_forward(out, mean, rstd, in, w_.value.data<float>(), b_.value.data<float>(), N, C_, eps_);
  else
    rmsnorm_forward(out, rstd, in, scale_weights(), N, C_, eps_);
}

void Norm::backward(float* d_in, const float* d_out, const float* in, const float* mean, const float* rstd,
                    int64_t N) {
  ensure_grad(w_.grad, {C_});
  if (layer_norm_) {
    ensure_grad(b_.grad, {C_});
    layernorm_backward(d_in, w_.grad.data<float>(), b_.grad.data<float>(), d_out, in, w_.value.data<float>(), mean,
                       rstd, N, C_);
  } else {
    // d(offset + w)/dw = 1: the weight gradient is the multiplier's.
    rmsnorm_backward(d_in, w_.grad.data<float>(), d_out, in, scale_weights(), rstd, N, C_);
  }
}

NormGradsOverTp::NormGradsOverTp(std::vector<Norm*> norms) {
  for (Norm* n : norms) {
    params_.push_back(&n->weight());
    if (n->layer_norm()) params_.push_back(&n->bias());
  }
  for (Param* p : params_) {
    held_.push_back(std::move(p->grad));
    p->grad = Tensor::zeros(p->value.shape(), DType::kF32);
  }
}

NormGradsOverTp::~NormGradsOverTp() { restore(); }

void NormGradsOverTp::restore() {
  for (size_t i = 0; i < held_.size(); ++i) params_[i]->grad = std::move(held_[i]);
  held_.clear();
}

void NormGradsOverTp::sum(Communicator& tp) {
  TP_ASSERT(!held_.empty() || params_.empty(), "NormGradsOverTp::sum called twice");
  int64_t n = 0;
  for (Param* p : params_) n += p->grad.numel();
  std::vector<float> parts(static_cast<size_t>(n));
  int64_t at = 0;
  for (Param* p : params_) {
    std::copy_n(p->grad.data<float>(), p->grad.numel(), parts.data() + at);
    at += p->grad.numel();
  }
  if (tp.size() > 1 && n > 0) tp.all_reduce(parts.data(), parts.data(), n, DType::kF32, ReduceOp::kSum);
  restore();
  at = 0;
  for (Param* p : params_) {
    ensure_grad(p->grad, p->value.shape());
    float* g = p->grad.data<float>();
    for (int64_t i = 0; i < p->grad.numel(); ++i) g[i] += parts[size_t(at + i)];
    at += p->grad.numel();
  }
}

}  // namespace tensorpar

// Norm (see norm.h).
#include "model/norm.h"

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

}  // namespace tensorpar

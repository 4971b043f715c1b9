// The normalisations of a decoder block, Replicated over the TP group: RMSNorm (Llama family)
// or LayerNorm with a bias (GPT-2), over the hidden dim.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tensorpar {

// A tensor with its lazily allocated f32 gradient.
struct Param {
  Tensor value, grad;
};

class Norm {
 public:
  Norm(int64_t hidden, bool layer_norm, float eps);

  bool layer_norm() const { return layer_norm_; }
  Param& weight() { return w_; }
  Param& bias() { return b_; }  // LayerNorm only
  int64_t weight_bytes() const;

  // out (N, C) = norm(in (N, C)); mean (LayerNorm only) and rstd (N) are written for backward.
  void forward(float* out, float* mean, float* rstd, const float* in, int64_t N) const;
  // d_in (N, C) += the input gradient of d_out (N, C); the weight (and bias) gradients
  // accumulate. in, mean, rstd: the forward's.
  void backward(float* d_in, const float* d_out, const float* in, const float* mean, const float* rstd, int64_t N);

 private:
  int64_t C_;
  bool layer_norm_;
  float eps_;
  Param w_, b_;
};

}  // namespace tensorpar

// The normalisations of a decoder block, Replicated over the TP group: RMSNorm (Llama family,
// Gemma with its (1 + weight) form) or LayerNorm with a bias (GPT-2), over the hidden dim (or a
// head's dims for Gemma's q/k norms).
#pragma once

#include <cstdint>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"

namespace tensorpar {

// A tensor with its lazily allocated f32 gradient.
struct Param {
  Tensor value, grad;
};

class Norm {
 public:
  // weight_offset: RMSNorm multiplies by (weight_offset + weight) (1 for HF Gemma checkpoints).
  Norm(int64_t hidden, bool layer_norm, float eps, float weight_offset = 0.0f);

  bool layer_norm() const { return layer_norm_; }
  int64_t size() const { return C_; }
  float weight_offset() const { return offset_; }
  Param& weight() { return w_; }
  Param& bias() { return b_; }  // LayerNorm only
  int64_t weight_bytes() const;

  // out (N, C) = norm(in (N, C)); mean (LayerNorm only) and rstd (N) are written for backward.
  void forward(float* out, float* mean, float* rstd, const float* in, int64_t N) const;
  // d_in (N, C) += the input gradient of d_out (N, C); the weight (and bias) gradients
  // accumulate. in, mean, rstd: the forward's.
  void backward(float* d_in, const float* d_out, const float* in, const float* mean, const float* rstd, int64_t N);

 private:
  // The multiplier (offset + weight): the weight itself when the offset is 0.
  const float* scale_weights() const;

  int64_t C_;
  bool layer_norm_;
  float eps_;
  float offset_;
  Param w_, b_;
  mutable std::vector<float> offset_w_;  // (C) offset + weight, refreshed per call
};

// Sequence parallelism runs each norm on this rank's rows only, so one backward's weight (and
// bias) gradient is Partial over TP: the norms' accumulated gradients are set aside while it
// runs, the backward's own parts summed over TP in one all-reduce, then added to them (summing
// the accumulated gradients instead would count earlier micro-batches tp times). Destroyed
// without sum(): the accumulated gradients come back untouched.
class NormGradsOverTp {
 public:
  explicit NormGradsOverTp(std::vector<Norm*> norms);
  ~NormGradsOverTp();
  NormGradsOverTp(const NormGradsOverTp&) = delete;
  NormGradsOverTp& operator=(const NormGradsOverTp&) = delete;
  // After the norms' backward: the parts summed over tp and added. Collective over tp.
  void sum(Communicator& tp);

 private:
  void restore();
  std::vector<Param*> params_;
  std::vector<Tensor> held_;  // the accumulated gradients, one per params_ entry
};

}  // namespace tensorpar

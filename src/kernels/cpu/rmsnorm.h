// RMSNorm (Llama, Qwen2): out = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) per row.
// The forward saves rstd per row for the backward.
#pragma once

#include <cstdint>

namespace tensorpar {

// out (N,C), rstd (N) saved for backward (may be nullptr at inference), inp (N,C), weight (C).
// out may alias inp.
void rmsnorm_forward(float* out, float* rstd, const float* inp, const float* weight, int64_t N,
                     int64_t C, float eps);
// d_inp (N,C) += ..., d_weight (C) += ... (either may be nullptr to skip it); d_out (N,C),
// inp (N,C), weight (C), rstd (N) from the forward. d_weight is summed in row order
// (deterministic whatever the thread count).
void rmsnorm_backward(float* d_inp, float* d_weight, const float* d_out, const float* inp,
                      const float* weight, const float* rstd, int64_t N, int64_t C);

}  // namespace tensorpar

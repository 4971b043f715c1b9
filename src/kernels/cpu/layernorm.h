// LayerNorm (GPT-2): out = (x - mean) * rstd * weight + bias per row, rstd = 1/sqrt(var + eps)
// with the biased variance. The forward saves mean and rstd per row for the backward.
#pragma once

#include <cstdint>

namespace tensorpar {

// out (N,C); mean, rstd (N) saved for backward (may be nullptr at inference); inp (N,C);
// weight (C); bias (C) or nullptr for none. out may alias inp.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                       const float* bias, int64_t N, int64_t C, float eps);
// d_inp (N,C), d_weight (C), d_bias (C) all accumulate (+=); any may be nullptr to skip it.
// d_out (N,C), inp (N,C), weight (C), mean and rstd (N) from the forward. Weight and bias
// gradients are summed in row order (deterministic whatever the thread count).
void layernorm_backward(float* d_inp, float* d_weight, float* d_bias, const float* d_out,
                        const float* inp, const float* weight, const float* mean, const float* rstd,
                        int64_t N, int64_t C);

}  // namespace tensorpar

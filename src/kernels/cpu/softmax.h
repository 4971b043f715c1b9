// Softmax over the last dim, numerically stable (the row max is subtracted before exp).
#pragma once

#include <cstdint>

namespace tensorpar {

// out (N,C) = softmax of each row of inp (N,C). out may alias inp.
void softmax_forward(float* out, const float* inp, int64_t N, int64_t C);
// d_inp (N,C) += out * (d_out - sum(d_out * out)) per row; out (N,C) from the forward.
void softmax_backward(float* d_inp, const float* d_out, const float* out, int64_t N, int64_t C);

}  // namespace tensorpar

// Pointwise activations and their gradients: GELU (tanh approximation, GPT-2's "gelu_new", and
// the exact erf form), SiLU, SwiGLU (out = silu(gate) * up, gate and up as separate inputs) and
// GeGLU (out = gelu_tanh(gate) * up, Gemma's MLP).
#pragma once

#include <cstdint>

namespace tensorpar {

// out (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))); out may alias inp.
void gelu_tanh_forward(float* out, const float* inp, int64_t N);
// d_inp (N) += gelu_tanh'(inp) * d_out.
void gelu_tanh_backward(float* d_inp, const float* d_out, const float* inp, int64_t N);

// out (N) = 0.5 x (1 + erf(x / sqrt(2))); out may alias inp.
void gelu_erf_forward(float* out, const float* inp, int64_t N);
// d_inp (N) += gelu_erf'(inp) * d_out.
void gelu_erf_backward(float* d_inp, const float* d_out, const float* inp, int64_t N);

// out (N) = x * sigmoid(x); out may alias inp.
void silu_forward(float* out, const float* inp, int64_t N);
// d_inp (N) += silu'(inp) * d_out.
void silu_backward(float* d_inp, const float* d_out, const float* inp, int64_t N);

// out (N) = silu(gate) * up, elementwise; out may alias gate or up.
void swiglu_forward(float* out, const float* gate, const float* up, int64_t N);
// d_gate (N) += silu'(gate) * up * d_out; d_up (N) += silu(gate) * d_out.
void swiglu_backward(float* d_gate, float* d_up, const float* d_out, const float* gate,
                     const float* up, int64_t N);
// The same over rows of a fused gate/up projection: gate_up (rows, 2F) holds each row's gate in
// columns [0, F) and its up in [F, 2F); out (rows, F); d_gate_up (rows, 2F) accumulates.
void swiglu_rows_forward(float* out, const float* gate_up, int64_t rows, int64_t F);
void swiglu_rows_backward(float* d_gate_up, const float* d_out, const float* gate_up, int64_t rows,
                          int64_t F);
// GeGLU over the same fused rows: out (rows, F) = gelu_tanh(gate) * up; d_gate_up (rows, 2F)
// accumulates gelu_tanh'(gate) * up * d_out and gelu_tanh(gate) * d_out.
void geglu_rows_forward(float* out, const float* gate_up, int64_t rows, int64_t F);
void geglu_rows_backward(float* d_gate_up, const float* d_out, const float* gate_up, int64_t rows,
                         int64_t F);

}  // namespace tensorpar

// Pointwise activations, parallel over chunks of elements; each chunk runs a loop compiled per
// ISA (fast_math.h) on the vectorised exp. The formulas are simple enough to be their own
// reference; the tests compare them with double-precision formulas and finite differences.
#include "kernels/cpu/activations.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "kernels/cpu/fast_math.h"
#include "kernels/cpu/parallel_if.h"

namespace tensorpar {
namespace {

// Below this many elements a loop runs on the calling thread: waking a team costs more than
// it saves (decode steps, small test sizes).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;
constexpr int64_t kChunk = 4096;

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCoeff = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1/sqrt(2 pi)

// Runs f(begin, count) over [0, N) in chunks, on the calling thread's team when N is large.
template <typename F>
void for_chunks(const char* where, int64_t N, F f) {
  TP_CHECK(N >= 0, "[", where, "] size: got N=", N, ", expected >= 0");
  const int64_t n_chunks = (N + kChunk - 1) / kChunk;
  parallel_if(N > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t c = 0; c < n_chunks; ++c) f(c * kChunk, std::min(N, (c + 1) * kChunk) - c * kChunk);
  });
}

// gelu_tanh(x) = 0.5 x (1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3):
// the sigmoid form has no cancellation for negative x.
TP_VECTOR_CLONES void gelu_tanh_fwd(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    out[i] = x * fast_sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCoeff * x * x * x));
  }
}

TP_VECTOR_CLONES void gelu_tanh_bwd(float* d_inp, const float* d_out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float s = fast_sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCoeff * x * x * x));
    const float du = 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    d_inp[i] += (s + x * s * (1.0f - s) * du) * d_out[i];
  }
}

TP_VECTOR_CLONES void silu_fwd(float* out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * fast_sigmoid(inp[i]);
}

TP_VECTOR_CLONES void silu_bwd(float* d_inp, const float* d_out, const float* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i], s = fast_sigmoid(x);
    d_inp[i] += s * (1.0f + x * (1.0f - s)) * d_out[i];
  }
}

TP_VECTOR_CLONES void swiglu_fwd(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] * fast_sigmoid(gate[i]) * up[i];
}

TP_VECTOR_CLONES void swiglu_bwd(float* d_gate, float* d_up, const float* d_out, const float* gate,
                                 const float* up, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], s = fast_sigmoid(g);
    d_gate[i] += s * (1.0f + g * (1.0f - s)) * up[i] * d_out[i];
    d_up[i] += g * s * d_out[i];
  }
}

}  // namespace

void gelu_tanh_forward(float* out, const float* inp, int64_t N) {
  for_chunks("gelu_tanh_forward", N,
             [&](int64_t b, int64_t n) { gelu_tanh_fwd(out + b, inp + b, n); });
}

void gelu_tanh_backward(float* d_inp, const float* d_out, const float* inp, int64_t N) {
  for_chunks("gelu_tanh_backward", N,
             [&](int64_t b, int64_t n) { gelu_tanh_bwd(d_inp + b, d_out + b, inp + b, n); });
}

// The erf form keeps libm's erf (scalar): GPT-2 and the Llama family use the tanh form and
// SiLU, so this path is not hot.
void gelu_erf_forward(float* out, const float* inp, int64_t N) {
  for_chunks("gelu_erf_forward", N, [&](int64_t b, int64_t n) {
    for (int64_t i = b; i < b + n; ++i)
      out[i] = 0.5f * inp[i] * (1.0f + std::erf(inp[i] * kInvSqrt2));
  });
}

void gelu_erf_backward(float* d_inp, const float* d_out, const float* inp, int64_t N) {
  for_chunks("gelu_erf_backward", N, [&](int64_t b, int64_t n) {
    for (int64_t i = b; i < b + n; ++i) {
      const float x = inp[i];
      const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
      const float pdf = kInvSqrt2Pi * fast_exp(-0.5f * x * x);
      d_inp[i] += (cdf + x * pdf) * d_out[i];
    }
  });
}

void silu_forward(float* out, const float* inp, int64_t N) {
  for_chunks("silu_forward", N, [&](int64_t b, int64_t n) { silu_fwd(out + b, inp + b, n); });
}

void silu_backward(float* d_inp, const float* d_out, const float* inp, int64_t N) {
  for_chunks("silu_backward", N,
             [&](int64_t b, int64_t n) { silu_bwd(d_inp + b, d_out + b, inp + b, n); });
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t N) {
  for_chunks("swiglu_forward", N,
             [&](int64_t b, int64_t n) { swiglu_fwd(out + b, gate + b, up + b, n); });
}

void swiglu_backward(float* d_gate, float* d_up, const float* d_out, const float* gate,
                     const float* up, int64_t N) {
  for_chunks("swiglu_backward", N, [&](int64_t b, int64_t n) {
    swiglu_bwd(d_gate + b, d_up + b, d_out + b, gate + b, up + b, n);
  });
}

// Rows in parallel (each row one vectorised loop) once the work is large enough.
void swiglu_rows_forward(float* out, const float* gate_up, int64_t rows, int64_t F) {
  TP_CHECK(rows >= 0 && F >= 0, "[swiglu_rows_forward] sizes: got rows=", rows, " F=", F);
  if (rows == 1) return swiglu_forward(out, gate_up, gate_up + F, F);
  parallel_if(rows * F > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) swiglu_fwd(out + r * F, gate_up + r * 2 * F, gate_up + r * 2 * F + F, F);
  });
}

void swiglu_rows_backward(float* d_gate_up, const float* d_out, const float* gate_up, int64_t rows, int64_t F) {
  TP_CHECK(rows >= 0 && F >= 0, "[swiglu_rows_backward] sizes: got rows=", rows, " F=", F);
  parallel_if(rows * F > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* d = d_gate_up + r * 2 * F;
      const float* g = gate_up + r * 2 * F;
      swiglu_bwd(d, d + F, d_out + r * F, g, g + F, F);
    }
  });
}

namespace {

TP_VECTOR_CLONES void geglu_fwd(float* out, const float* gate, const float* up, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    out[i] = x * fast_sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCoeff * x * x * x)) * up[i];
  }
}

TP_VECTOR_CLONES void geglu_bwd(float* d_gate, float* d_up, const float* d_out, const float* gate, const float* up,
                                int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    const float s = fast_sigmoid(2.0f * kSqrt2OverPi * (x + kGeluCoeff * x * x * x));
    const float du = 2.0f * kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    d_gate[i] += (s + x * s * (1.0f - s) * du) * up[i] * d_out[i];
    d_up[i] += x * s * d_out[i];
  }
}

}  // namespace

void geglu_rows_forward(float* out, const float* gate_up, int64_t rows, int64_t F) {
  TP_CHECK(rows >= 0 && F >= 0, "[geglu_rows_forward] sizes: got rows=", rows, " F=", F);
  parallel_if(rows * F > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) geglu_fwd(out + r * F, gate_up + r * 2 * F, gate_up + r * 2 * F + F, F);
  });
}

void geglu_rows_backward(float* d_gate_up, const float* d_out, const float* gate_up, int64_t rows, int64_t F) {
  TP_CHECK(rows >= 0 && F >= 0, "[geglu_rows_backward] sizes: got rows=", rows, " F=", F);
  parallel_if(rows * F > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      float* d = d_gate_up + r * 2 * F;
      const float* g = gate_up + r * 2 * F;
      geglu_bwd(d, d + F, d_out + r * F, g, g + F, F);
    }
  });
}

}  // namespace tensorpar

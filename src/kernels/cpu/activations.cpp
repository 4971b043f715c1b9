// Pointwise activations, parallel over elements. The formulas are simple enough to be their own
// reference; the tests compare them with double-precision formulas and finite differences.
#include "kernels/cpu/activations.h"

#include <cmath>

#include "core/error.h"

namespace tensorpar {
namespace {

// Below this many elements of work a loop runs on the calling thread: waking a team costs
// more than it saves (decode steps, small test sizes).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

constexpr float kSqrt2OverPi = 0.7978845608028654f;  // sqrt(2/pi)
constexpr float kGeluCoeff = 0.044715f;
constexpr float kInvSqrt2 = 0.7071067811865476f;
constexpr float kInvSqrt2Pi = 0.3989422804014327f;  // 1/sqrt(2 pi)

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void check_n(const char* where, int64_t N) {
  TP_CHECK(N >= 0, "[", where, "] size: got N=", N, ", expected >= 0");
}

}  // namespace

void gelu_tanh_forward(float* out, const float* inp, int64_t N) {
  check_n("gelu_tanh_forward", N);
#pragma omp parallel for simd schedule(static) if (N > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kGeluCoeff * x * x * x)));
  }
}

void gelu_tanh_backward(float* d_inp, const float* d_out, const float* inp, int64_t N) {
  check_n("gelu_tanh_backward", N);
#pragma omp parallel for simd schedule(static) if (N > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    const float u = kSqrt2OverPi * (x + kGeluCoeff * x * x * x);
    const float th = std::tanh(u);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCoeff * x * x);
    const float g = 0.5f * (1.0f + th) + 0.5f * x * (1.0f - th * th) * du;
    d_inp[i] += g * d_out[i];
  }
}

void gelu_erf_forward(float* out, const float* inp, int64_t N) {
  check_n("gelu_erf_forward", N);
#pragma omp parallel for simd schedule(static) if (N > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    out[i] = 0.5f * x * (1.0f + std::erf(x * kInvSqrt2));
  }
}

void gelu_erf_backward(float* d_inp, const float* d_out, const float* inp, int64_t N) {
  check_n("gelu_erf_backward", N);
#pragma omp parallel for simd schedule(static) if (N > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i];
    const float cdf = 0.5f * (1.0f + std::erf(x * kInvSqrt2));
    const float pdf = kInvSqrt2Pi * std::exp(-0.5f * x * x);
    d_inp[i] += (cdf + x * pdf) * d_out[i];
  }
}

void silu_forward(float* out, const float* inp, int64_t N) {
  check_n("silu_forward", N);
#pragma omp parallel for simd schedule(static) if (N > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) out[i] = inp[i] * sigmoid(inp[i]);
}

void silu_backward(float* d_inp, const float* d_out, const float* inp, int64_t N) {
  check_n("silu_backward", N);
#pragma omp parallel for simd schedule(static) if (N > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float x = inp[i], s = sigmoid(x);
    d_inp[i] += s * (1.0f + x * (1.0f - s)) * d_out[i];
  }
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t N) {
  check_n("swiglu_forward", N);
#pragma omp parallel for simd schedule(static) if (N > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float g = gate[i];
    out[i] = g * sigmoid(g) * up[i];
  }
}

void swiglu_backward(float* d_gate, float* d_up, const float* d_out, const float* gate,
                     const float* up, int64_t N) {
  check_n("swiglu_backward", N);
#pragma omp parallel for simd schedule(static) if (N > kMinParallelWork)
  for (int64_t i = 0; i < N; ++i) {
    const float g = gate[i], s = sigmoid(g);
    d_gate[i] += s * (1.0f + g * (1.0f - s)) * up[i] * d_out[i];
    d_up[i] += g * s * d_out[i];
  }
}

}  // namespace tensorpar

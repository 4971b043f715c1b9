// Vectorisable float exp (and what is built on it) for the pointwise and softmax kernels:
// std::exp is a scalar libm call that the compiler cannot vectorise, and it dominates
// softmax, cross-entropy, attention and SiLU. Loops that call these inline functions are put in
// functions marked TP_VECTOR_CLONES, compiled for AVX-512, AVX2 and the baseline and picked at
// run time (no ISA is assumed at build time).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

// Run-time ISA dispatch (GCC/Clang ifunc): one body, compiled for each target. Not under the
// sanitizers: an ifunc resolver runs before their runtime is up (a crash at load under TSan).
// The clones are ISA levels, which the resolver checks by feature: x86-64-v3 (AVX2 with FMA and
// F16C) and x86-64-v4 (v3 with AVX-512 F/BW/DQ/VL). "avx2" alone has no FMA (std::fma a libm
// call), and "arch=haswell" is checked by CPU model, so no AMD CPU would ever run it. "avx512f"
// alone has FMA only at 512 bits: the 256-bit and scalar remainders of a loop then multiply and
// add in two roundings where its 512-bit body fuses them, so an element's bits depended on where
// a loop's bounds put it (a TP shard's width, a key block's start).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define TP_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TP_VECTOR_CLONES
#endif

namespace tensorpar {

// exp(x) with relative error below 2e-7 over the float range; exp(-inf) = 0, exp(+inf) = inf,
// NaN propagates. Branch-free so that it vectorises: x = k ln2 + r with |r| <= ln2/2, exp(r)
// by a degree-7 polynomial, 2^k assembled in the exponent bits.
inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln2 split so that k * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float xc = x < -87.5f ? -87.5f : (x > 88.75f ? 88.75f : x);
  const float kb = xc * kLog2e + kRound;  // k in the low mantissa bits
  const float k = kb - kRound;
  const float r = (xc - k * kLn2Hi) - k * kLn2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^k as two factors 2^(k/2) 2^(k - k/2): k spans [-127, 128], beyond one exponent field.
  const int32_t ki = std::bit_cast<int32_t>(kb) - std::bit_cast<int32_t>(kRound);
  const int32_t ka = ki >> 1, kb2 = ki - ka;
  const float sa =
      std::bit_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(ka + 127) << 23));
  const float sb =
      std::bit_cast<float>(static_cast<int32_t>(static_cast<uint32_t>(kb2 + 127) << 23));
  const float y = p * sa * sb;
  // Outside the clamp: exact limits; NaN fails both comparisons and is passed on.
  return x < -87.5f ? 0.0f
                    : (x > 88.75f ? std::numeric_limits<float>::infinity() : (x == x ? y : x));
}

// 1 / (1 + exp(-x)).
inline float fast_sigmoid(float x) {
  return 1.0f / (1.0f + fast_exp(-x));
}

// tanh(x) = 1 - 2 / (exp(2x) + 1): exact limits at +-inf; absolute error ~1e-7.
inline float fast_tanh(float x) {
  return 1.0f - 2.0f / (fast_exp(2.0f * x) + 1.0f);
}

// ---- Row primitives built on fast_exp, compiled per ISA (fast_math.cpp). Sums of exp are
// accumulated in float within blocks of 1024 and in double across blocks (rows may be a whole
// vocabulary).

// max of x (n); -inf when n == 0.
float row_max(const float* x, int64_t n);
// sum of exp(x - shift) over x (n).
double exp_sum(const float* x, float shift, int64_t n);
// y (n) = exp(x - shift) and returns its sum; y may alias x.
double exp_store_sum(float* y, const float* x, float shift, int64_t n);
// y (n) += exp(x - shift) * scale + offset.
void add_scaled_exp(float* y, const float* x, float shift, float scale, float offset, int64_t n);

}  // namespace tensorpar

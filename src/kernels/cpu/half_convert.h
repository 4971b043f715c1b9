// Arrays of IEEE f16 to f32 and back (round to nearest even): AVX-512 or F16C (vcvtph2ps /
// vcvtps2ph, 16 or 8 values at a time) where the CPU has them, core/half.h's scalar conversions
// elsewhere; the same bits every way for every finite value and infinity (NaNs stay NaNs).
// Arrays of bf16 to f32 and back: core/half.h's conversions written branch-free and compiled for
// AVX-512, AVX2 and the baseline (picked at run time), bitwise the scalar ones for every input,
// NaNs included.
#pragma once

#include <cstdint>

#include "core/half.h"

namespace tensorpar {

void f16_to_f32_n(float* dst, const f16* src, int64_t n);
void f32_to_f16_n(f16* dst, const float* src, int64_t n);
void bf16_to_f32_n(float* dst, const bf16* src, int64_t n);
void f32_to_bf16_n(bf16* dst, const float* src, int64_t n);

}  // namespace tensorpar

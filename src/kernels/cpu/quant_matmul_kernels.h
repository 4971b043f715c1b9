// Internal to quant_matmul: the per-ISA inner kernels (scalar in quant_matmul.cpp, AVX2 and
// AVX-512 in quant_matmul_simd.cpp, compiled with target attributes and picked at run time).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/half.h"

namespace tensorpar::quant_detail {

// Whether a legacy type has a per-block offset m (x = q*d + m): its dot needs block sums of x.
constexpr bool quant_has_offset(DType t) { return t == DType::kQ4_1 || t == DType::kQ5_1; }

// Most activation rows one call of a dot kernel handles (register blocking).
inline constexpr int kMaxRows = 4;

// res[r] = sum_k W[k] * x[r*ldx + k] for r < rows, W one quantized row of nb blocks of type t
// (32 or 256 weights each, dtype_block_elems). xsum[r*ldxs + b] is the sum of x row r over
// block b (used by the offset term of q4_1 and q5_1).
using DotFn = void (*)(const void* w, DType t, int64_t nb, const float* x, int64_t ldx,
                       const float* xsum, int64_t ldxs, int rows, float* res);
// out[0 .. nb*32) = dequantized W row (f32, or bf16 when the output is bf16).
using DequantF32Fn = void (*)(float* out, const void* w, DType t, int64_t nb);
using DequantBf16Fn = void (*)(bf16* out, const void* w, DType t, int64_t nb);

void dot_scalar(const void* w, DType t, int64_t nb, const float* x, int64_t ldx,
                const float* xsum, int64_t ldxs, int rows, float* res);
void dot_avx2(const void* w, DType t, int64_t nb, const float* x, int64_t ldx, const float* xsum,
              int64_t ldxs, int rows, float* res);
void dot_avx512(const void* w, DType t, int64_t nb, const float* x, int64_t ldx,
                const float* xsum, int64_t ldxs, int rows, float* res);
void dequant_bf16_avx512(bf16* out, const void* w, DType t, int64_t nb);
void dequant_f32_avx512(float* out, const void* w, DType t, int64_t nb);
// nb K-quant super-blocks dequantized to f32 with AVX-512, bitwise equal to dequantize_row
// (each weight is (scale * q) - offset, rounded as the reference rounds).
void dequant_kquant_avx512(float* out, const void* w, DType t, int64_t nb);

bool cpu_has_avx2();
bool cpu_has_avx512();

}  // namespace tensorpar::quant_detail

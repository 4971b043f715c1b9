// bf16 weights in K-major panels for CPUs without AVX512-BF16 or AMX (AVX2 with FMA and F16C):
// the inference matmul out (M,N) = in (M,K) x weight^T + bias with lanes over outputs instead of
// over K. Each output is one fma chain over k = 0, 1, ..., K-1 starting from +0, then + bias: an
// order that depends on K alone, so a row's result is bitwise the same alone or among any rows of
// a batch, on any thread count (the server's batch invariance, as rowwise_matmul.h keeps it).
// With lanes over K (rowwise_matmul.h) every output needs its own horizontal sum and the weight
// row feeds one output; here one load of 16 weights feeds 16 outputs, each broadcast input value
// feeds all of them, and the 2 x 8 widened lanes come from one shift and one mask (no shuffles),
// so prefill and batched decode run near the FMA peak and decode reads one stream per thread.
//
// Layout (dtype kBF16x64; a tensor of logical shape (N, K)). The output rows go in groups of
// kBf16PanelRows = 64 (the last group padded with zero rows); group g is K x 64 bf16 values
// stored k after k (128 bytes per k), so group g is one contiguous stream of K x 128 bytes. Within
// the 64 values of one k, quarter q (16 values, 32 bytes) holds rows 64 g + 16 q + 0..15 in the
// order r0, r8, r1, r9, ..., r7, r15: 32-bit lane l holds rows 16 q + l (low half) and 16 q + 8 + l
// (high half), so shifting the lanes left by 16 widens rows 0..7 and masking off the low half
// widens rows 8..15, each as 8 floats in row order. The packing is exact and invertible.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tensorpar {

// Whether this CPU runs the panel kernel and inference should keep bf16 weights in panels:
// AVX2 with FMA and F16C, and neither AVX-512 nor AMX nor AVX512-BF16 (those have their own bf16
// kernels), unless TENSORPAR_BF16_KERNEL names another kernel (matmul.cpp reads it).
bool bf16_panels_usable();

// w (N, K) bf16 (rows may be strided) as a kBF16x64 tensor of the same logical shape; new
// storage, w untouched. Throws for other dtypes or shapes.
Tensor bf16_pack_panels(const Tensor& w);
// The plain (N, K) bf16 layout back, bitwise the tensor bf16_pack_panels was given.
Tensor bf16_unpack_panels(const Tensor& packed);
// Row r of a panel-packed tensor widened to K floats (the embedding lookup of a tied head).
void bf16_panel_row_f32(const Tensor& packed, int64_t r, float* dst);

// out (M,N) = in (M,K) x weight^T + bias. in: f32 (M,K), unit column stride, any row stride;
// weight: kBF16x64 (N,K); bias: f32 (N) or null; out: f32 (M,N), unit column stride, any row
// stride. Requires bf16_panels_usable()'s AVX2, FMA and F16C (throws otherwise).
void bf16_panels_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias);

// The test oracle: the same per-output order (a std::fma chain over k from +0, then + bias) on a
// plain (N, K) bf16 weight, one output at a time. Bitwise bf16_panels_matmul_forward's result.
void bf16_panels_matmul_reference(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias);

}  // namespace tensorpar

// Float weights (f32, bf16, f16) in K-major panels for CPUs without AVX512-BF16 or AMX (AVX2 with
// FMA and F16C): the inference matmul out (M,N) = in (M,K) x weight^T + bias with lanes over
// outputs instead of over K. Each output is one fma chain over k = 0, 1, ..., K-1 starting from
// +0, then + bias: an order that depends on K alone, so a row's result is bitwise the same alone
// or among any rows of a batch, on any thread count (the server's batch invariance, as
// rowwise_matmul.h keeps it). With lanes over K (rowwise_matmul.h) every output needs its own
// horizontal sum and a weight load feeds one output; here one load of weights feeds 8 or 16
// outputs and each broadcast input value feeds all of them, so prefill and batched decode run
// near the FMA peak, and decode reads one stream per thread.
//
// Layout (dtypes kF32x64, kBF16x64, kF16x64; a tensor of logical shape (N, K)). The output rows go
// in groups of kPanelRows = 64 (the last group padded with zero rows); group g is K x 64 values
// stored k after k (64 values per k), so group g is one contiguous stream. Within the 64 values of
// one k, quarter q (16 values) holds rows 64 g + 16 q + 0..15:
// - f32: in row order; two loads of 8 values give rows 0..7 and 8..15.
// - f16: in row order; two F16C conversions of 8 values widen rows 0..7 and 8..15.
// - bf16: in the order r0, r8, r1, r9, ..., r7, r15 (32-bit lane l holds rows l and 8 + l), so
//   shifting the lanes left by 16 widens rows 0..7 and masking off the low halves widens rows
//   8..15, each as 8 floats in row order, with no shuffles.
// The packing is exact and invertible.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tensorpar {

// Whether this CPU can run the panel kernel: AVX2 with FMA and F16C. Whether inference uses it is
// matmul.h's panels_preferred().
bool panels_usable();

// w (N, K) f32, bf16 or f16 (rows may be strided) in panels (kF32x64, kBF16x64 or kF16x64) of
// the same logical shape; new storage, w untouched. Throws for other dtypes or shapes.
Tensor pack_panels(const Tensor& w);
// The plain (N, K) layout back, bitwise the tensor pack_panels was given.
Tensor unpack_panels(const Tensor& packed);
// Row r of a panel-packed tensor widened to K floats (the embedding lookup of a tied head).
void panel_row_f32(const Tensor& packed, int64_t r, float* dst);

// out (M,N) = in (M,K) x weight^T + bias. in: f32 (M,K), unit column stride, any row stride;
// weight: kF32x64, kBF16x64 or kF16x64 (N,K); bias: f32 (N) or null; out: f32 (M,N), unit
// column stride, any row stride. Requires panels_usable() (throws otherwise).
void panel_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias);

// The test oracle: the same per-output order (a std::fma chain over k from +0, then + bias) on a
// plain (N, K) f32, bf16 or f16 weight, one output at a time. Bitwise panel_matmul_forward's
// result.
void panel_matmul_reference(Tensor& out, const Tensor& in, const Tensor& weight,
                            const Tensor* bias);

}  // namespace tensorpar

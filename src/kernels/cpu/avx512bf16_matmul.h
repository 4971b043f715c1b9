// bf16 weights multiplied with AVX512-BF16's VDPBF16PS, for inference on CPUs that have it but no
// AMX: out (M,N) f32 = bf16(in) (M,K) x weight^T (N,K) bf16 + bias, f32 accumulation, the same
// arithmetic contract as amx_matmul.h (activations rounded to bf16 once; its naive reference,
// bf16_rounded_matmul_naive, is this kernel's oracle too).
//
// Batch-invariant: each output is one dot product whose 16 lanes accumulate K in chunks of 32
// (one VDPBF16PS per chunk: lane l takes k = 32c + 2l and 2l + 1), then the lanes are summed in a
// fixed tree, whatever M, the row's position or the thread count. Register blocking (6 weight rows
// x 4 input rows) and cache blocking (input rows in chunks that stay in L2 while every weight row
// streams past once per chunk) only decide which dots run side by side.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tensorpar {

// True when the CPU has AVX512-BF16 (and AVX512F/BW).
bool avx512_bf16_usable();

// Scratch bytes avx512bf16_matmul_forward needs for M rows of K (the bf16 activations).
int64_t avx512bf16_scratch_bytes(int64_t M, int64_t K);

// Operands as amx_bf16_matmul_forward's; requires avx512_bf16_usable(). scratch 64-byte aligned.
void avx512bf16_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                               void* scratch);

}  // namespace tensorpar

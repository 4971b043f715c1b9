// bf16 weights multiplied on Intel AMX tiles (TDPBF16PS), for inference: out (M,N) f32 =
// bf16(in) (M,K) x weight^T (N,K) bf16 + bias, f32 accumulation. The activations are rounded to
// bf16 (as llama.cpp's and PyTorch's bf16 paths do); the weights are read in place, in their HF
// [out,in] layout (they are the tiles' A operand, so nothing is repacked at load).
//
// Batch-invariant like rowwise_matmul.h: every output element is accumulated over K in chunks of
// 32 in a fixed order, and each chunk's 16 pairs in the instruction's fixed order, whatever M is,
// wherever the row sits in the batch and however many threads run. A row gets bitwise the same
// result alone (decode) or among hundreds of rows (prefill, continuous batching). One call reads
// the weight once, so decode runs at memory speed and a batch of 16 rows costs about what one does.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace tensorpar {

// True when the CPU has AMX-TILE and AMX-BF16 and the kernel granted this process the tile data
// state (Linux arch_prctl ARCH_REQ_XCOMP_PERM), asked once.
bool amx_bf16_usable();

// Scratch bytes amx_bf16_matmul_forward needs for M rows of K (the packed activations).
int64_t amx_bf16_scratch_bytes(int64_t M, int64_t K);

// in (M,K) f32, unit column stride; weight (N,K) bf16, unit column stride; bias (N) f32 or null;
// out (M,N) f32, unit column stride; scratch: amx_bf16_scratch_bytes(M, K) bytes, 64-byte
// aligned. Requires amx_bf16_usable().
void amx_bf16_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                             void* scratch);

// The oracle: in rounded to bf16 as the kernel rounds it, products summed in double.
void bf16_rounded_matmul_naive(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias);

}  // namespace tensorpar

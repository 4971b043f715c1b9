// Matmul with a block-quantized weight (any GGUF block quant with a DType: legacy 32-weight
// blocks and 256-weight K-quant super-blocks) that is never
// dequantized whole: few rows (decode) run a fused dequant-dot kernel chosen at run time
// (AVX-512, AVX2, scalar); many rows dequantize bf16/f32 tiles of W and hand them to oneDNN.
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "kernels/cpu/matmul.h"

namespace tensorpar {

// Instruction sets the fused kernel can use; kAuto picks the best the CPU has.
enum class QuantIsa { kAuto, kScalar, kAvx2, kAvx512 };

// Rows of `in` up to which the fused kernel is used; above it, tiles + oneDNN.
inline constexpr int64_t kQuantFusedMaxRows = 4;  // measured crossover (2048x4096, q4_1)

// out (M,N) = in (M,K) x weight^T [+ bias (N)] + beta * out, weight (N,K) quantized.
// in: f32 or bf16, 2-D (any row stride); out: f32 or bf16, 2-D; weight rows may be strided
// (a column slice at block boundaries). beta is 0 (overwrite) or 1 (accumulate).
void quant_matmul_forward(MatmulEngine& eng, Tensor& out, const Tensor& in, const Tensor& weight,
                          const Tensor* bias, float beta = 0.0f);
// d_in (M,K) += d_out (M,N) x weight (N,K), dequantizing tiles of W (no gradient for W).
void quant_matmul_backward_input(MatmulEngine& eng, Tensor& d_in, const Tensor& d_out,
                                 const Tensor& weight);

// The fused few-row kernel with a forced instruction set (tests and benches); throws if the CPU
// lacks it. Same contract as quant_matmul_forward with beta = 0, any M.
void quant_matmul_forward_fused(MatmulEngine& eng, Tensor& out, const Tensor& in,
                                const Tensor& weight, const Tensor* bias, QuantIsa isa);
// The tiled many-row path, forced (tests and benches).
void quant_matmul_forward_tiled(MatmulEngine& eng, Tensor& out, const Tensor& in,
                                const Tensor& weight, const Tensor* bias, float beta = 0.0f);
bool quant_isa_supported(QuantIsa isa);

}  // namespace tensorpar

// Batch-invariant matmul of block-quantized weights with 8-bit activations, as llama.cpp
// multiplies GGUF weights on CPUs: each input row is rounded to int8 blocks first (Q8_0-style
// blocks of 32 with an f16 scale for the legacy weight types, Q8_K-style super-blocks of 256 with
// an f32 scale for the K-quants), then every block pair is an exact integer dot product
// (AVX512-VNNI VPDPBUSD, or AVX2's VPMADDUBSW + VPMADDWD: 4 products per 32-bit lane)
// scaled by the weight's and the activation's block scales in f32. The integer sums are exact, so
// the only rounding besides the activations' own is the f32 scaling and accumulation, done in an
// order that depends on K only: a row's result is bitwise the same alone or in any batch, at any
// thread count (the property rowwise_matmul.h gives float weights).
//
// Why: a quantized weight is read once per token at decode, so the kernel must keep up with the
// memory; unpacking to f32 and FMAs cannot on 2 cores, integer dots of 64 weights per instruction
// can. Rounding activations to 8 bits costs ~0.5% perplexity against f32 activations (measured
// in docs/BENCHMARKS.md) and gives the same numerics as llama.cpp on the same file.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"

namespace tensorpar {

// The instruction sets the kernels are written for: AVX-512 F/BW/VL/DQ with VNNI, and AVX2 with
// FMA and F16C. Each gives a row the same result alone or in any batch; the two may differ from
// each other in the last bits (their f32 accumulation orders differ).
enum class Int8Kernel { kVnni512, kAvx2 };

// The kernels this CPU runs, best first (empty: none).
const std::vector<Int8Kernel>& int8_matmul_kernels();
const char* int8_kernel_name(Int8Kernel k);

// Whether this CPU runs an int8 kernel and weights of type t have one: Q4_0, Q4_1, Q5_0, Q5_1,
// Q8_0, IQ4_NL, Q4_K, Q5_K, Q6_K. (Q2_K and Q3_K are not covered: matmul_forward multiplies them
// with f32 activations.)
bool int8_matmul_usable(DType t);

// Whether inference keeps weights of GGUF type t row-packed (int8_packed.h) on this CPU: where a
// row-packed kernel for t reads them faster than the GGUF layout's kernel (docs/BENCHMARKS.md
// "Weights row-packed at load"): with AVX-512 VNNI the 32-weight types; with AVX2 alone those
// and Q4_K, Q5_K.
bool int8_packed_rows_preferred(DType t);

// Bytes of scratch int8_matmul_forward needs for M input rows of K.
int64_t int8_matmul_scratch_bytes(int64_t M, int64_t K, DType t);

// out (M,N) f32 (any row stride) = q8(in) (M,K) x weight^T + bias. in: f32, unit column stride;
// weight (N,K) block-quantized with whole blocks per row (rows may be strided: a column slice at
// block boundaries), or row-packed (int8_packed.h); bias (N) f32 or null. scratch: int8_matmul_scratch_bytes(M, K, t) bytes,
// 64-byte aligned. The CPU's best kernel, or the one named (which this CPU must run). Throws
// when !int8_matmul_usable(weight.dtype()).
void int8_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                         void* scratch);
void int8_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias,
                         void* scratch, Int8Kernel kernel);

// The naive reference (the test oracle): every input row rounded by the same 8-bit rule, then
// dequantized (d * q), the weight dequantized by dequantize_row, and each output one float64 dot.
void int8_matmul_reference(Tensor& out, const Tensor& in, const Tensor& weight, const Tensor* bias);

// The 8-bit rounding of one row of n activations (n a multiple of the block: 32 for legacy weight
// types, 256 for K-quants), as the kernel sees it: q[i] in [-127, 127] and the scale of each block
// (legacy: max|x| / 127 rounded to f16; K-quants: max|x| / 127 in f32, signed so that the
// element of largest magnitude is -127). Exposed for the reference and tests.
void int8_quantize_activations(const float* x, int64_t n, DType weight_type, int8_t* q, float* block_scales);

}  // namespace tensorpar

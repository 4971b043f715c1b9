// Batch-invariant matmul for inference: out (M,N) = in (M,K) x weight^T + bias where every output
// element is one dot product computed in a fixed order that depends only on K, never on M, on
// which rows share the call, or on the thread count. A row therefore gets bitwise the same
// result whether it runs alone (decode of one sequence) or among hundreds of rows of other
// sequences (continuous batching): the property that lets a server promise identical greedy
// output under any load. Weight-stationary: a few weight rows stay in registers/L1 while all
// input rows stream past, so the weight is read from memory once per call (decode runs at
// memory speed) and prefill chunks are compute-bound rather than bandwidth-bound.
#pragma once

#include "core/tensor.h"

namespace tensorpar {

// in (M,K) f32, any row stride; weight (N,K) f32, bf16, f16, or any block quant (GGUF blocks,
// dequantized a tile of 32 rows at a time into an L2 buffer: legacy blocks as q * d + m, K-quants
// as (d * sc) * q - dmin * m; one or two rows of a legacy type dequantize in registers to the same
// values); bias (N) f32 or null; out (M,N) f32, any row stride. Tiles of 32 weight rows: every
// group of input rows passes a whole tile before the next group, so inputs stream once per tile.
// AVX-512 when the CPU has it, else AVX2 (FMA, F16C: bitwise the portable loop's results), else a
// portable loop, all with the same per-element arithmetic order (the AVX-512 path's in-register
// dequantization may differ from the others in the last bits, never within one machine).
void rowwise_matmul_forward(Tensor& out, const Tensor& in, const Tensor& weight,
                            const Tensor* bias);

// Forces the portable loop (tests compare both paths' invariance).
void rowwise_matmul_forward_portable(Tensor& out, const Tensor& in, const Tensor& weight,
                                     const Tensor* bias);

}  // namespace tensorpar

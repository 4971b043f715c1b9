// Reference dequantization of the ggml K-quants that llama.cpp's common mixes use (Q4_K, Q5_K,
// Q6_K: 256-weight super-blocks with per-sub-block scales). They have no in-memory DType here:
// loading converts them to a float dtype once. Layouts from ggml's block definitions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensorpar {

inline constexpr int kKQuantBlock = 256;

// Each decodes n weights (a multiple of 256) from consecutive super-blocks at src into out.
// Q4_K (144 bytes): f16 d, f16 dmin, 12 bytes of packed 6-bit scales/mins, 128 bytes of nibbles.
void dequantize_q4_k(float* out, const std::byte* src, int64_t n);
// Q5_K (176 bytes): as Q4_K plus 32 bytes holding the fifth bit of every weight.
void dequantize_q5_k(float* out, const std::byte* src, int64_t n);
// Q6_K (210 bytes): 128 bytes of low nibbles, 64 of high 2-bit pairs, 16 int8 scales, f16 d.
void dequantize_q6_k(float* out, const std::byte* src, int64_t n);

}  // namespace tensorpar

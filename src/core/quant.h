// GGUF block-quant layouts (32 weights per block) and their reference dequantization.
// q8_0: x = q*d; q4_0: x = (q-8)*d; q4_1: x = q*d + m. Nibbles: low halves of the 16 bytes
// are elements 0..15, high halves 16..31.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/half.h"

namespace tensorpar {

inline constexpr int kQuantBlock = 32;

struct BlockQ8_0 {
  f16 d;
  int8_t qs[32];
};
struct BlockQ4_0 {
  f16 d;
  uint8_t qs[16];
};
struct BlockQ4_1 {
  f16 d;
  f16 m;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);

// Dequantizes n elements (a multiple of 32) of quantized type t starting at src into f32.
void dequantize_row(float* out, const void* src, DType t, int64_t n);
// Quantizes n floats (a multiple of 32) into blocks of type t (round to nearest, as ggml's
// reference quantizers do). Used to make test data and to convert weights once at load.
void quantize_row(void* out, const float* src, DType t, int64_t n);

}  // namespace tensorpar

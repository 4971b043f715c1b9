// 16-bit float formats: bf16 (the top half of an f32) and IEEE f16. Conversions round to
// nearest even; NaN stays NaN. Scalar and portable: kernels vectorise where it matters.
#pragma once

#include <bit>
#include <cstdint>

namespace tensorpar {

struct bf16 {
  uint16_t bits;
};
struct f16 {
  uint16_t bits;
};

inline float bf16_to_f32(bf16 h) { return std::bit_cast<float>(uint32_t(h.bits) << 16); }

inline bf16 f32_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

float f16_to_f32(f16 h);
f16 f32_to_f16(float f);

}  // namespace tensorpar

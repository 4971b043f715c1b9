// IEEE binary16 <-> binary32 with subnormals, infinities and NaN; round to nearest even.
#include "core/half.h"

#include <cmath>
#include <cstring>

namespace tensorpar {

float f16_to_f32(f16 h) {
  const uint32_t sign = uint32_t(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1fu;
  const uint32_t man = h.bits & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (man == 0) {
      out = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp(float(man), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (man << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (man << 13);
  }
  return std::bit_cast<float>(out);
}

f16 f32_to_f16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};  // NaN
  if (abs >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {  // below the smallest normal f16 (2^-14): subnormal or zero
    // Scale so that the subnormal unit 2^-24 becomes 1, then round to nearest even.
    const float scaled = std::bit_cast<float>(abs) * 16777216.0f;  // 2^24
    const uint32_t m = uint32_t(std::nearbyint(scaled));
    return f16{uint16_t(sign | m)};
  }
  uint32_t r = abs + 0xfffu + ((abs >> 13) & 1u);  // round mantissa to 10 bits
  r -= 0x38000000u;                                  // rebias exponent 127 -> 15
  return f16{uint16_t(sign | (r >> 13))};
}

}  // namespace tensorpar

// Floats as monotone integers: float_key orders like the float (-0 and +0 share a key), so a
// bisection over keys is exact over floats and a max over keys is a max over floats. Shared by
// the single-row and the batched sampler, which must agree bit for bit.
#pragma once

#include <bit>
#include <cstdint>

namespace tensorpar {

inline int64_t float_key(float f) {
  const int32_t b = std::bit_cast<int32_t>(f);
  return b >= 0 ? int64_t(b) : -int64_t(b & 0x7fffffff);
}

inline float key_float(int64_t k) {
  return k >= 0 ? std::bit_cast<float>(int32_t(k))
                : std::bit_cast<float>(int32_t(uint32_t(-k) | 0x80000000u));
}

}  // namespace tensorpar

// Random block-quantized weights for the quantized kernel tests: every byte random (so every
// quant value, sub-block scale and fifth/high bit occurs), the f16 scale fields set so that
// dequantized weights stay within about [-1.5, 1.5], like the f32 tests' uniform inputs.
#pragma once

#include <cstring>
#include <vector>

#include "core/quant.h"
#include "test_util.h"

namespace tensorpar::testing {

// Every block-quantized DType.
inline constexpr DType kAllQuantTypes[] = {DType::kQ8_0, DType::kQ4_0,   DType::kQ4_1, DType::kQ5_0,
                                           DType::kQ5_1, DType::kIQ4_NL, DType::kQ2_K, DType::kQ3_K,
                                           DType::kQ4_K, DType::kQ5_K,   DType::kQ6_K};

struct ScaleField {
  int offset;   // byte offset of an f16 field inside the block
  float bound;  // its values are uniform in [-bound, bound]
};

// The f16 fields of each block layout (quant.h) and bounds of 1 / max |quant * sub-scale|.
inline std::vector<ScaleField> scale_fields(DType t) {
  switch (t) {
    case DType::kQ8_0:
      return {{0, 1.0f / 128}};
    case DType::kQ4_0:
      return {{0, 1.0f / 8}};
    case DType::kQ4_1:
      return {{0, 1.0f / 15}, {2, 0.5f}};
    case DType::kQ5_0:
      return {{0, 1.0f / 16}};
    case DType::kQ5_1:
      return {{0, 1.0f / 31}, {2, 0.5f}};
    case DType::kIQ4_NL:
      return {{0, 1.0f / 127}};
    case DType::kQ2_K:
      return {{80, 1.0f / 45}, {82, 1.0f / 30}};
    case DType::kQ3_K:
      return {{108, 1.0f / 128}};
    case DType::kQ4_K:
      return {{0, 1.0f / 945}, {2, 1.0f / 126}};
    case DType::kQ5_K:
      return {{0, 1.0f / 1953}, {2, 1.0f / 126}};
    case DType::kQ6_K:
      return {{208, 1.0f / 4096}};
    default:
      return {};
  }
}

// An (n, k) tensor of type t with random blocks (k a multiple of the block size).
inline Tensor random_blocks(Rng& rng, int64_t n, int64_t k, DType t) {
  Tensor w = Tensor::empty({n, k}, t);
  auto* p = static_cast<uint8_t*>(w.raw());
  const int64_t bytes = w.nbytes(), bb = dtype_block_bytes(t);
  for (int64_t i = 0; i < bytes; ++i) p[i] = uint8_t(rng.integer(0, 256));
  for (int64_t b = 0; b < bytes / bb; ++b)
    for (const ScaleField& f : scale_fields(t)) {
      const uint16_t h = f32_to_f16(rng.uniform(-f.bound, f.bound)).bits;
      std::memcpy(p + b * bb + f.offset, &h, 2);
    }
  return w;
}

// The bytes of a tensor's elements (contiguous copy first).
inline std::vector<char> bytes_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  const auto* p = static_cast<const char*>(c.raw());
  return std::vector<char>(p, p + c.nbytes());
}

}  // namespace tensorpar::testing

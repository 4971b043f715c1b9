// Scalar reference (de)quantization for the GGUF block formats. The matmul kernels carry
// their own vectorised tile dequantizers and test against these.
#include "core/quant.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tensorpar {

void dequantize_row(float* out, const void* src, DType t, int64_t n) {
  TP_CHECK(n % kQuantBlock == 0, "[dequantize_row] length ", n, " is not a multiple of 32");
  const int64_t nb = n / kQuantBlock;
  switch (t) {
    case DType::kQ8_0: {
      const auto* b = static_cast<const BlockQ8_0*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 32; ++j) out[i * 32 + j] = float(b[i].qs[j]) * d;
      }
      return;
    }
    case DType::kQ4_0: {
      const auto* b = static_cast<const BlockQ4_0*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 16; ++j) {
          out[i * 32 + j] = float(int(b[i].qs[j] & 0xf) - 8) * d;
          out[i * 32 + j + 16] = float(int(b[i].qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
    case DType::kQ4_1: {
      const auto* b = static_cast<const BlockQ4_1*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
        for (int j = 0; j < 16; ++j) {
          out[i * 32 + j] = float(b[i].qs[j] & 0xf) * d + m;
          out[i * 32 + j + 16] = float(b[i].qs[j] >> 4) * d + m;
        }
      }
      return;
    }
    default:
      TP_CHECK(false, "[dequantize_row] ", dtype_name(t), " is not a block-quantized type");
  }
}

void quantize_row(void* out, const float* src, DType t, int64_t n) {
  TP_CHECK(n % kQuantBlock == 0, "[quantize_row] length ", n, " is not a multiple of 32");
  const int64_t nb = n / kQuantBlock;
  for (int64_t i = 0; i < nb; ++i) {
    const float* x = src + i * 32;
    switch (t) {
      case DType::kQ8_0: {
        float amax = 0;
        for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
        auto& b = static_cast<BlockQ8_0*>(out)[i];
        b.d = f32_to_f16(d);
        for (int j = 0; j < 32; ++j) b.qs[j] = int8_t(std::lround(x[j] * id));
        break;
      }
      case DType::kQ4_0: {
        // ggml's choice: the element of largest magnitude maps to -8 exactly.
        float amax = 0, vmax = 0;
        for (int j = 0; j < 32; ++j) {
          if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), vmax = x[j];
        }
        const float d = vmax / -8.0f, id = d ? 1.0f / d : 0.0f;
        auto& b = static_cast<BlockQ4_0*>(out)[i];
        b.d = f32_to_f16(d);
        for (int j = 0; j < 16; ++j) {
          const int q0 = std::min(15, int(x[j] * id + 8.5f));
          const int q1 = std::min(15, int(x[j + 16] * id + 8.5f));
          b.qs[j] = uint8_t(q0 | (q1 << 4));
        }
        break;
      }
      case DType::kQ4_1: {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
        const float d = (hi - lo) / 15.0f, id = d ? 1.0f / d : 0.0f;
        auto& b = static_cast<BlockQ4_1*>(out)[i];
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(lo);
        for (int j = 0; j < 16; ++j) {
          const int q0 = std::min(15, int((x[j] - lo) * id + 0.5f));
          const int q1 = std::min(15, int((x[j + 16] - lo) * id + 0.5f));
          b.qs[j] = uint8_t(q0 | (q1 << 4));
        }
        break;
      }
      default:
        TP_CHECK(false, "[quantize_row] ", dtype_name(t), " is not a block-quantized type");
    }
  }
}

}  // namespace tensorpar

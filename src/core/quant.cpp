// Scalar reference (de)quantization of the legacy GGUF block formats (32 weights per block;
// the K-quants are in quant_k.cpp). The matmul kernels carry their own vectorised
// dequantizers and test against these.
#include "core/quant.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace tensorpar {

namespace {

// The 5-bit values of a q5 block: nibbles plus bit j of qh (little-endian) for element j.
void q5_values(const uint8_t* qs, const uint8_t* qh, int v[32]) {
  const uint32_t h = uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
  for (int j = 0; j < 16; ++j) {
    v[j] = (qs[j] & 0xf) | int((h >> j) & 1) << 4;
    v[j + 16] = (qs[j] >> 4) | int((h >> (j + 16)) & 1) << 4;
  }
}

}  // namespace

void dequantize_row(float* out, const void* src, DType t, int64_t n) {
  TP_CHECK(dtype_is_quantized(t), "[dequantize_row] ", dtype_name(t), " is not a block-quantized type");
  const int64_t be = dtype_block_elems(t);
  TP_CHECK(n % be == 0, "[dequantize_row] length ", n, " of ", dtype_name(t), " is not a multiple of ", be);
  const int64_t nb = n / be;
  if (dtype_is_kquant(t)) return quant_detail::dequantize_kquant(out, src, t, nb);
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
    case DType::kQ5_0: {
      const auto* b = static_cast<const BlockQ5_0*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(b[i].d);
        int v[32];
        q5_values(b[i].qs, b[i].qh, v);
        for (int j = 0; j < 32; ++j) out[i * 32 + j] = float(v[j] - 16) * d;
      }
      return;
    }
    case DType::kQ5_1: {
      const auto* b = static_cast<const BlockQ5_1*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(b[i].d), m = f16_to_f32(b[i].m);
        int v[32];
        q5_values(b[i].qs, b[i].qh, v);
        for (int j = 0; j < 32; ++j) out[i * 32 + j] = float(v[j]) * d + m;
      }
      return;
    }
    case DType::kIQ4_NL: {
      const auto* b = static_cast<const BlockIQ4_NL*>(src);
      for (int64_t i = 0; i < nb; ++i) {
        const float d = f16_to_f32(b[i].d);
        for (int j = 0; j < 16; ++j) {
          out[i * 32 + j] = d * float(kIq4nlValues[b[i].qs[j] & 0xf]);
          out[i * 32 + j + 16] = d * float(kIq4nlValues[b[i].qs[j] >> 4]);
        }
      }
      return;
    }
    default:
      TP_ASSERT(false, "unhandled quantized dtype");
  }
}

namespace {

// q = min(31, int((x - lo) * id + bias)) split into nibbles and the 32 fifth bits.
void pack_q5(uint8_t* qs, uint8_t* qh, const float* x, float id, float lo, float bias) {
  uint32_t h = 0;
  for (int j = 0; j < 16; ++j) {
    const int q0 = std::min(31, int((x[j] - lo) * id + bias));
    const int q1 = std::min(31, int((x[j + 16] - lo) * id + bias));
    qs[j] = uint8_t((q0 & 0xf) | (q1 & 0xf) << 4);
    h |= uint32_t(q0 >> 4) << j | uint32_t(q1 >> 4) << (j + 16);
  }
  for (int k = 0; k < 4; ++k) qh[k] = uint8_t(h >> (8 * k));
}

}  // namespace

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
      case DType::kQ5_0: {
        // As q4_0: the element of largest magnitude maps to -16 exactly.
        float amax = 0, vmax = 0;
        for (int j = 0; j < 32; ++j) {
          if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), vmax = x[j];
        }
        const float d = vmax / -16.0f, id = d ? 1.0f / d : 0.0f;
        auto& b = static_cast<BlockQ5_0*>(out)[i];
        b.d = f32_to_f16(d);
        pack_q5(b.qs, b.qh, x, id, 0.0f, 16.5f);
        break;
      }
      case DType::kQ5_1: {
        float lo = x[0], hi = x[0];
        for (int j = 1; j < 32; ++j) lo = std::min(lo, x[j]), hi = std::max(hi, x[j]);
        const float d = (hi - lo) / 31.0f, id = d ? 1.0f / d : 0.0f;
        auto& b = static_cast<BlockQ5_1*>(out)[i];
        b.d = f32_to_f16(d);
        b.m = f32_to_f16(lo);
        pack_q5(b.qs, b.qh, x, id, lo, 0.5f);
        break;
      }
      default:
        TP_CHECK(false, "[quantize_row] ", dtype_name(t),
                 " has no quantizer here (it is loaded from files as it is), expected q8_0, q4_0, q4_1, q5_0 or q5_1");
    }
  }
}

}  // namespace tensorpar

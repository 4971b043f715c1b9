// Scalar reference dequantization of ggml's K-quants (256-weight super-blocks; layouts in
// quant.h). The oracle for the vectorised dequantizers in kernels/cpu and the loader's decoder.
// Every weight is (sub-block scale) * q - (sub-block offset), each factor rounded to f32 first,
// as ggml's reference does.
#include <cstring>

#include "core/error.h"
#include "core/quant.h"

namespace tensorpar {

void q3_k_scales(const uint8_t* packed, int8_t out[16]) {
  // Low 4 bits: nibbles of bytes 0..7 (sub-blocks 0..7 low nibbles, 8..15 high nibbles);
  // high 2 bits: bit pairs of bytes 8..11.
  for (int j = 0; j < 16; ++j) {
    const int lo = j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4;
    const int hi = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = int8_t((lo | hi << 4) - 32);
  }
}

namespace quant_detail {
namespace {

void dequant_q2_k(float* y, const BlockQ2_K& b) {
  const float d = f16_to_f32(b.d), dmin = f16_to_f32(b.dmin);
  // Weight e: 2 bits at shift 2*((e%128)/32) of qs[32*(e/128) + e%32]; sub-block e/16.
  for (int e = 0; e < 256; ++e) {
    const int q = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const uint8_t sc = b.scales[e / 16];
    y[e] = d * float(sc & 0xF) * float(q) - dmin * float(sc >> 4);
  }
}

void dequant_q3_k(float* y, const BlockQ3_K& b) {
  const float d = f16_to_f32(b.d);
  int8_t sc[16];
  q3_k_scales(b.scales, sc);
  // Weight e: low 2 bits as in q2_k; its high bit is bit e/32 of hmask[e%32], and a clear bit
  // subtracts 4.
  for (int e = 0; e < 256; ++e) {
    const int lo = (b.qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
    const int q = lo - ((b.hmask[e % 32] >> (e / 32)) & 1 ? 0 : 4);
    y[e] = d * float(sc[e / 16]) * float(q);
  }
}

// Shared by Q4_K and Q5_K; qh is null for Q4_K.
void dequant_k4_k5(float* y, f16 d16, f16 dmin16, const uint8_t* scales, const uint8_t* qh,
                   const uint8_t* qs) {
  const float d = f16_to_f32(d16), dmin = f16_to_f32(dmin16);
  for (int j = 0; j < 8; ++j) {
    int sc = 0, m = 0;
    kquant_scale_min(scales, j, sc, m);
    const float ds = d * float(sc), dm = dmin * float(m);
    // Sub-blocks 2c and 2c+1 share the 32 bytes qs[32c..]: low nibbles, then high nibbles.
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0xF;
      if (qh) v |= ((qh[l] >> j) & 1) << 4;
      y[32 * j + l] = ds * float(v) - dm;
    }
  }
}

void dequant_q6_k(float* y, const BlockQ6_K& b) {
  const float d = f16_to_f32(b.d);
  // Each half of 128 weights uses 64 bytes of ql and 32 of qh: weight r of the half takes
  // nibble r/64 of ql[r%64] and bit pair r/32 of qh[r%32].
  for (int h = 0; h < 2; ++h) {
    for (int r = 0; r < 128; ++r) {
      const int lo = (b.ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
      const int hi = (b.qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
      const int e = 128 * h + r;
      y[e] = d * float(b.scales[e / 16]) * float((lo | (hi << 4)) - 32);
    }
  }
}

}  // namespace

void dequantize_kquant(float* out, const void* src, DType t, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i) {
    float* y = out + i * kKQuantBlock;
    switch (t) {
      case DType::kQ2_K:
        dequant_q2_k(y, static_cast<const BlockQ2_K*>(src)[i]);
        break;
      case DType::kQ3_K:
        dequant_q3_k(y, static_cast<const BlockQ3_K*>(src)[i]);
        break;
      case DType::kQ4_K: {
        const auto& b = static_cast<const BlockQ4_K*>(src)[i];
        dequant_k4_k5(y, b.d, b.dmin, b.scales, nullptr, b.qs);
        break;
      }
      case DType::kQ5_K: {
        const auto& b = static_cast<const BlockQ5_K*>(src)[i];
        dequant_k4_k5(y, b.d, b.dmin, b.scales, b.qh, b.qs);
        break;
      }
      case DType::kQ6_K:
        dequant_q6_k(y, static_cast<const BlockQ6_K*>(src)[i]);
        break;
      default:
        TP_ASSERT(false, "not a K-quant");
    }
  }
}

}  // namespace quant_detail
}  // namespace tensorpar

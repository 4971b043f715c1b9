// GGUF block-quant layouts (exactly ggml's structs) and their reference dequantization.
// Legacy quants, 32 weights per block: q8_0 x = q*d; q4_0 x = (q-8)*d; q4_1 x = q*d + m;
// q5_0 x = (q-16)*d; q5_1 x = q*d + m; iq4_nl x = d * kIq4nlValues[q]. Nibbles: the low halves
// of the 16 bytes are elements 0..15, the high halves 16..31; q5's fifth bits: bit j of qh.
// K-quants, 256 weights per super-block with per-sub-block scales: see quant_k.cpp.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/dtype.h"
#include "core/half.h"

namespace tensorpar {

inline constexpr int kQuantBlock = 32;    // legacy block
inline constexpr int kKQuantBlock = 256;  // K-quant super-block

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
struct BlockQ5_0 {
  f16 d;
  uint8_t qh[4];  // fifth bit of element j: bit j of the little-endian uint32
  uint8_t qs[16];
};
struct BlockQ5_1 {
  f16 d;
  f16 m;
  uint8_t qh[4];
  uint8_t qs[16];
};
struct BlockIQ4_NL {
  f16 d;
  uint8_t qs[16];  // indices into kIq4nlValues
};
// Q2_K: 16 sub-blocks of 16; x = d*(sc&15)*q - dmin*(sc>>4), q 2 bits.
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  f16 d;
  f16 dmin;
};
// Q3_K: 16 sub-blocks of 16; x = d*(s-32)*(q-4*!hbit), s 6 bits packed in 12 bytes, q 2 bits.
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  f16 d;
};
// Q4_K: 8 sub-blocks of 32; x = d*sc*q - dmin*m, sc and m 6 bits packed in 12 bytes.
struct BlockQ4_K {
  f16 d;
  f16 dmin;
  uint8_t scales[12];
  uint8_t qs[128];
};
// Q5_K: Q4_K plus the fifth bit of every weight (bit j of qh[l]: sub-block j, element l).
struct BlockQ5_K {
  f16 d;
  f16 dmin;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
// Q6_K: 16 sub-blocks of 16; x = d*sc*(q-32), q 6 bits (low nibble in ql, two high bits in qh).
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  f16 d;
};
static_assert(sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22 && sizeof(BlockQ5_1) == 24 && sizeof(BlockIQ4_NL) == 18);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210);

// ggml's non-linear 4-bit code book of iq4_nl.
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Dequantizes n elements (a multiple of the block size of t) starting at src into f32.
void dequantize_row(float* out, const void* src, DType t, int64_t n);
// Quantizes n floats (a multiple of 32) into blocks of type t (round to nearest, as ggml's
// reference quantizers do), for q8_0, q4_0, q4_1, q5_0, q5_1. Used to make test data and to
// convert weights once at load; the other types are load-only and throw.
void quantize_row(void* out, const float* src, DType t, int64_t n);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K super-block's 12 packed bytes.
inline void kquant_scale_min(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}
// All 8 scales and all 8 mins of a Q4_K/Q5_K super-block at once: byte j of `scales8` and of
// `mins8` is what kquant_scale_min gives for sub-block j. Word operations on the 12 packed bytes
// (little-endian), for the kernels; kquant_scale_min is the reference.
inline void kquant_scales_mins(const uint8_t* s, uint64_t& scales8, uint64_t& mins8) {
  uint32_t u[3];
  std::memcpy(u, s, 12);
  const uint32_t six = 0x3f3f3f3f, four = 0x0f0f0f0f, two = 0x03030303;
  const uint32_t sc_hi = (u[2] & four) | (((u[0] >> 6) & two) << 4);
  const uint32_t mn_hi = ((u[2] >> 4) & four) | (((u[1] >> 6) & two) << 4);
  scales8 = uint64_t(sc_hi) << 32 | (u[0] & six);
  mins8 = uint64_t(mn_hi) << 32 | (u[1] & six);
}
// The 16 signed scales (6 bits, minus 32) of a Q3_K super-block's 12 packed bytes.
void q3_k_scales(const uint8_t* packed, int8_t out[16]);

namespace quant_detail {
// K-quant reference dequantization of nb super-blocks (quant_k.cpp).
void dequantize_kquant(float* out, const void* src, DType t, int64_t nb);
}  // namespace quant_detail

}  // namespace tensorpar

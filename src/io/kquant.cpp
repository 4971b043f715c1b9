// Scalar K-quant dequantization (the loader's one-time conversion, not a matmul kernel).
// Q4_K/Q5_K: 8 sub-blocks of 32 weights, x = (d*scale_j)*q - (dmin*min_j) with 6-bit scale_j
// and min_j packed into 12 bytes. Q6_K: 16 sub-blocks of 16 weights, x = (d*scale_j)*(q - 32).
#include "io/kquant.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"

namespace tensorpar {
namespace {

float load_f16(const std::byte* p) {
  f16 h;
  std::memcpy(&h.bits, p, 2);
  return f16_to_f32(h);
}

// The 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes: sub-blocks 0..3 keep
// theirs in the low 6 bits of bytes j and j+4; 4..7 split theirs between the nibbles of byte
// j+4 and the top 2 bits of bytes j-4 (scale) and j (min).
void scale_min_k4(const uint8_t* s, int j, int& scale, int& min) {
  if (j < 4) {
    scale = s[j] & 63;
    min = s[j + 4] & 63;
  } else {
    scale = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
    min = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// Shared by Q4_K and Q5_K; qh is null for Q4_K.
void dequantize_k4_k5(float* out, const std::byte* blk, const uint8_t* scales, const uint8_t* qh,
                      const uint8_t* qs) {
  const float d = load_f16(blk), dmin = load_f16(blk + 2);
  for (int j = 0; j < 8; ++j) {
    int sc = 0, m = 0;
    scale_min_k4(scales, j, sc, m);
    const float ds = d * float(sc), dm = dmin * float(m);
    // Sub-blocks 2c and 2c+1 share the 32 bytes qs[32c..]: low nibbles, then high nibbles.
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int v = (q[l] >> shift) & 0xF;
      if (qh) v |= ((qh[l] >> j) & 1) << 4;
      out[32 * j + l] = ds * float(v) - dm;
    }
  }
}

void check_len(int64_t n, const char* where) {
  TP_CHECK(n % kKQuantBlock == 0, "[", where, "] length ", n, " is not a multiple of 256");
}

}  // namespace

void dequantize_q4_k(float* out, const std::byte* src, int64_t n) {
  check_len(n, "dequantize_q4_k");
  for (int64_t b = 0; b < n / kKQuantBlock; ++b) {
    const std::byte* blk = src + b * 144;
    const auto* u = reinterpret_cast<const uint8_t*>(blk);
    dequantize_k4_k5(out + b * kKQuantBlock, blk, u + 4, nullptr, u + 16);
  }
}

void dequantize_q5_k(float* out, const std::byte* src, int64_t n) {
  check_len(n, "dequantize_q5_k");
  for (int64_t b = 0; b < n / kKQuantBlock; ++b) {
    const std::byte* blk = src + b * 176;
    const auto* u = reinterpret_cast<const uint8_t*>(blk);
    dequantize_k4_k5(out + b * kKQuantBlock, blk, u + 4, u + 16, u + 48);
  }
}

void dequantize_q6_k(float* out, const std::byte* src, int64_t n) {
  check_len(n, "dequantize_q6_k");
  for (int64_t b = 0; b < n / kKQuantBlock; ++b) {
    const auto* ql = reinterpret_cast<const uint8_t*>(src + b * 210);
    const uint8_t* qh = ql + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(ql + 192);
    const float d = load_f16(src + b * 210 + 208);
    float* y = out + b * kKQuantBlock;
    // Each half of 128 weights uses 64 bytes of ql and 32 of qh: weight r of the half takes
    // nibble r/64 of ql[r%64] and bit pair r/32 of qh[r%32].
    for (int h = 0; h < 2; ++h) {
      for (int r = 0; r < 128; ++r) {
        const int lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0xF;
        const int hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 3;
        const int e = 128 * h + r;
        y[e] = (d * float(sc[e / 16])) * float((lo | (hi << 4)) - 32);
      }
    }
  }
}

}  // namespace tensorpar

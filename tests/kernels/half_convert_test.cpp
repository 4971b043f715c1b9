// The array conversions (AVX-512 or F16C where the CPU has them) against core/half.h's scalar
// ones, the reference: every f16 and bf16 bit pattern widened, and f32 values of every kind narrowed
// (normal, subnormal and overflowing ranges, exact ties), bit for bit; NaN stays NaN (bf16: the
// scalar conversion's very bits).
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/half_convert.h"
#include "test_util.h"

namespace tensorpar {
namespace {

bool is_nan_f16(f16 h) { return (h.bits & 0x7c00u) == 0x7c00u && (h.bits & 0x3ffu) != 0; }

TEST(HalfConvert, EveryF16WidensAsTheScalarConversion) {
  std::vector<f16> h(65536 + 7);  // a tail past the 16-wide vectors
  for (size_t i = 0; i < h.size(); ++i) h[i] = f16{uint16_t(i)};
  std::vector<float> got(h.size());
  f16_to_f32_n(got.data(), h.data(), int64_t(h.size()));
  for (size_t i = 0; i < h.size(); ++i) {
    const float want = f16_to_f32(h[i]);
    if (is_nan_f16(h[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want)) << "bits " << i;
    }
  }
}

TEST(HalfConvert, F32NarrowsAsTheScalarConversion) {
  testing::Rng rng(5);
  std::vector<float> x;
  for (float scale : {1e-8f, 6e-5f, 1e-3f, 1.0f, 300.0f, 65504.0f, 7e4f, 1e6f})
    for (int i = 0; i < 200; ++i) x.push_back(scale * rng.uniform());
  // Exact ties between neighbouring f16 values (round to even), extremes, zeros, infinities.
  for (uint16_t b : {uint16_t(0x3c00), uint16_t(0x3c01), uint16_t(0x0001), uint16_t(0x03ff), uint16_t(0x7bff)}) {
    const float lo = f16_to_f32(f16{b}), hi = f16_to_f32(f16{uint16_t(b + 1)});
    x.push_back(0.5f * (lo + hi));
    x.push_back(-0.5f * (lo + hi));
  }
  for (float v : {0.0f, -0.0f, 65520.0f, 65519.99f, std::numeric_limits<float>::infinity(),
                  -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::denorm_min()})
    x.push_back(v);
  x.push_back(std::numeric_limits<float>::quiet_NaN());
  std::vector<f16> got(x.size());
  f32_to_f16_n(got.data(), x.data(), int64_t(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {
      EXPECT_TRUE(is_nan_f16(got[i]));
    } else {
      EXPECT_EQ(got[i].bits, f32_to_f16(x[i]).bits) << "value " << x[i];
    }
  }
}

TEST(HalfConvert, EveryBf16WidensAsTheScalarConversion) {
  std::vector<bf16> h(65536 + 7);  // a tail past the vectors
  for (size_t i = 0; i < h.size(); ++i) h[i] = bf16{uint16_t(i)};
  std::vector<float> got(h.size());
  bf16_to_f32_n(got.data(), h.data(), int64_t(h.size()));
  for (size_t i = 0; i < h.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(bf16_to_f32(h[i]))) << i;
}

// Every f32 bit pattern with the low 16 bits taking the values that decide the rounding (0,
// just below / at / just above the tie, the largest), both signs: NaNs, infinities, subnormals,
// overflow to infinity and ties to even included. Odd lengths leave tails past the vectors.
TEST(HalfConvert, EveryF32HighHalfNarrowsToBf16AsTheScalarConversion) {
  std::vector<float> x;
  for (uint32_t hi = 0; hi < 65536; ++hi)
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu})
      x.push_back(std::bit_cast<float>(hi << 16 | lo));
  for (int64_t n : {int64_t(x.size()), int64_t(x.size()) - 5}) {
    std::vector<bf16> got(size_t(n), bf16{0x1234});
    f32_to_bf16_n(got.data(), x.data(), n);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += got[size_t(i)].bits != f32_to_bf16(x[size_t(i)]).bits;
    EXPECT_EQ(wrong, 0) << "of " << n;
  }
}

}  // namespace
}  // namespace tensorpar

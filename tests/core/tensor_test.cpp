#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/checked_math.h"
#include "core/half.h"
#include "core/quant.h"
#include "core/tensor.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::Rng;

TEST(Tensor, EmptyIsAlignedAndSized) {
  Tensor t = Tensor::empty({3, 5, 7}, DType::kF32);
  EXPECT_EQ(t.numel(), 105);
  EXPECT_EQ(t.nbytes(), 420);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(t.strides(), (Shape{35, 7, 1}));
}

TEST(Tensor, OverflowingShapeIsAnError) {
  const int64_t big = int64_t(1) << 40;
  EXPECT_THROW(Tensor::empty({big, big}, DType::kF32), Error);
  EXPECT_THROW(Tensor::empty({-1, 4}, DType::kF32), Error);
  // numel fits in int64 but the byte count does not.
  EXPECT_THROW(Tensor::empty({int64_t(1) << 62, 1}, DType::kF32), Error);
  // Zero elements, but strides that overflow.
  EXPECT_THROW(Tensor::empty({0, big, big}, DType::kF32), Error);
}

TEST(Tensor, SliceIsAViewAlongAnyDim) {
  TP_SEED_TRACE();
  Rng rng(1);
  Tensor t = rng.uniform_tensor({4, 6, 5});
  const auto all = t.to_vector();
  for (int d = 0; d < 3; ++d) {
    const int64_t n = t.dim(d), b = 1, e = n - 1;
    Tensor s = t.slice(d, b, e);
    EXPECT_EQ(s.dim(d), e - b);
    const auto got = s.to_vector();
    size_t k = 0;
    for (int64_t i = 0; i < 4; ++i)
      for (int64_t j = 0; j < 6; ++j)
        for (int64_t l = 0; l < 5; ++l) {
          const int64_t idx[3] = {i, j, l};
          if (idx[d] < b || idx[d] >= e) continue;
          ASSERT_EQ(got[k++], all[size_t((i * 6 + j) * 5 + l)]);
        }
    EXPECT_EQ(k, got.size());
  }
  // A view shares memory with its source.
  Tensor s = t.slice(1, 2, 3);
  s.fill(42.0f);
  EXPECT_EQ(t.to_vector()[2 * 5], 42.0f);
  EXPECT_THROW(t.slice(0, 2, 5), Error);
  EXPECT_THROW(t.slice(3, 0, 1), Error);
}

TEST(Tensor, TransposeAndContiguous) {
  TP_SEED_TRACE();
  Rng rng(2);
  Tensor t = rng.uniform_tensor({3, 7});
  Tensor tt = t.transpose(0, 1);
  EXPECT_FALSE(tt.is_contiguous());
  Tensor c = tt.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  const auto a = t.to_vector(), b = c.to_vector();
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 7; ++j) ASSERT_EQ(b[size_t(j * 3 + i)], a[size_t(i * 7 + j)]);
  EXPECT_THROW(tt.reshape({21}), Error);
  EXPECT_EQ(c.reshape({21}).dim(0), 21);
  EXPECT_THROW(c.reshape({20}), Error);
}

TEST(Tensor, FillZeroClearsEveryByteWithAnyThreadCount) {
  // Sizes on both sides of the 1 MiB from which the team zeroes 64 KiB pieces, with a last piece
  // shorter than the others; every byte before set, every byte after checked.
  const int saved = omp_get_max_threads();
  for (const int64_t n : {int64_t(1000), int64_t((1 << 18) - 1), int64_t((1 << 18) + 1),
                          int64_t(300007)}) {
    for (const int threads : {saved, 1}) {
      omp_set_num_threads(threads);
      Tensor t = Tensor::empty({n}, DType::kF32);
      std::memset(t.raw(), 0xff, size_t(t.nbytes()));
      t.fill_zero();
      const auto* b = static_cast<const unsigned char*>(t.raw());
      int64_t nonzero = 0;
      for (int64_t i = 0; i < t.nbytes(); ++i) nonzero += b[i] != 0;
      EXPECT_EQ(nonzero, 0) << n << " floats, " << threads << " threads";
    }
  }
  omp_set_num_threads(saved);
}

TEST(Tensor, TypedAccessChecksDtype) {
  Tensor t = Tensor::zeros({4}, DType::kBF16);
  EXPECT_NO_THROW(t.data<bf16>());
  EXPECT_THROW(t.data<float>(), Error);
}

TEST(Half, Bf16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f).bits, 0x3f80);
  // 1 + 2^-8 is exactly halfway between two bf16 values: ties to even (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f).bits, 0x3f80);
  // 1 + 3*2^-8 ties up to the even 1 + 2^-6.
  EXPECT_EQ(f32_to_bf16(1.01171875f).bits, 0x3f82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(Half, F16RoundTripsEveryValue) {
  // Every finite f16 converts to f32 and back to itself (an independent check of both ways).
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const f16 h{uint16_t(b)};
    const float f = f16_to_f32(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(f16_to_f32(f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(f32_to_f16(f).bits, h.bits) << "bits " << b;
  }
  EXPECT_EQ(f16_to_f32(f16{0x3c00}), 1.0f);
  EXPECT_EQ(f16_to_f32(f16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(f32_to_f16(70000.0f).bits, 0x7c00);  // overflow -> inf
}

TEST(Quant, RoundTripWithinHalfAStep) {
  TP_SEED_TRACE();
  Rng rng(3);
  for (DType t : {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0, DType::kQ5_1}) {
    const int64_t n = 32 * 9;
    auto x = rng.uniform_vec(size_t(n), -2, 3);
    std::vector<uint8_t> q(static_cast<size_t>(dtype_nbytes(t, n)));
    quantize_row(q.data(), x.data(), t, n);
    std::vector<float> y(static_cast<size_t>(n));
    dequantize_row(y.data(), q.data(), t, n);
    for (int64_t b = 0; b < n / 32; ++b) {
      float lo = x[size_t(b * 32)], hi = lo;
      for (int j = 0; j < 32; ++j) lo = std::min(lo, x[size_t(b * 32 + j)]), hi = std::max(hi, x[size_t(b * 32 + j)]);
      const float amax = std::max(std::fabs(lo), std::fabs(hi));
      const float step = t == DType::kQ8_0   ? amax / 127
                         : t == DType::kQ4_0 ? amax / 8
                         : t == DType::kQ5_0 ? amax / 16
                         : t == DType::kQ5_1 ? (hi - lo) / 31
                                             : (hi - lo) / 15;
      // q4_0 / q5_0 (ggml): the scale maps the value of largest magnitude to code -8 / -16, so
      // the codes reach only 7 / 15 steps on the other side: values there (up to amax) clamp and
      // may be off by up to a whole step. Everything else is within half a step.
      const bool clamps_far_side = t == DType::kQ4_0 || t == DType::kQ5_0;
      const float extreme = std::fabs(lo) >= std::fabs(hi) ? lo : hi;
      for (int j = 0; j < 32; ++j) {
        const float xv = x[size_t(b * 32 + j)];
        const bool far_side = clamps_far_side && (xv > 0) != (extreme > 0);
        // Half a step (a whole one on the clamped side) plus the f16 rounding of the scale.
        const float tol = (far_side ? 1.0f : 0.5f) * step * 1.01f + amax * 2e-3f;
        ASSERT_NEAR(y[size_t(b * 32 + j)], xv, tol) << dtype_name(t);
      }
    }
  }
}

TEST(Quant, BlockLayoutMatchesGguf) {
  // Hand-built blocks, decoded by the layout rules of the GGUF spec.
  BlockQ4_1 b{};
  b.d = f32_to_f16(0.5f);
  b.m = f32_to_f16(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = uint8_t((j & 0xf) | ((15 - j) << 4));
  float y[32];
  dequantize_row(y, &b, DType::kQ4_1, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], float(j) * 0.5f - 1.0f);
    EXPECT_EQ(y[j + 16], float(15 - j) * 0.5f - 1.0f);
  }
  BlockQ4_0 c{};
  c.d = f32_to_f16(2.0f);
  std::memset(c.qs, 0x9a, 16);  // low nibble 10, high nibble 9
  dequantize_row(y, &c, DType::kQ4_0, 32);
  EXPECT_EQ(y[0], 4.0f);
  EXPECT_EQ(y[16], 2.0f);
  EXPECT_EQ(dtype_nbytes(DType::kQ8_0, 64), 68);
  EXPECT_THROW(dtype_nbytes(DType::kQ4_0, 33), Error);
}

TEST(Tensor, ConvertsBetweenDtypes) {
  TP_SEED_TRACE();
  Rng rng(4);
  Tensor t = rng.uniform_tensor({5, 64});
  const auto x = t.to_vector();
  for (DType d : {DType::kBF16, DType::kF16}) {
    const auto y = t.to(d).to_vector();
    const double tol = d == DType::kBF16 ? 1.0 / 256 : 1.0 / 2048;
    for (size_t i = 0; i < x.size(); ++i) ASSERT_NEAR(y[i], x[i], tol * std::fabs(x[i]) + 1e-7);
  }
  // Quantized tensors slice at block boundaries only, and convert back to f32 row by row.
  Tensor q = Tensor::empty({5, 64}, DType::kQ8_0);
  for (int r = 0; r < 5; ++r)
    quantize_row(static_cast<char*>(q.raw()) + r * 68, x.data() + r * 64, DType::kQ8_0, 64);
  EXPECT_THROW(q.slice(1, 0, 16), Error);
  const auto half = q.slice(1, 32, 64).to_vector();
  for (int r = 0; r < 5; ++r)
    for (int j = 0; j < 32; ++j) ASSERT_NEAR(half[size_t(r * 32 + j)], x[size_t(r * 64 + 32 + j)], 0.01);
  // A column slice copies whole rows of blocks: its contiguous copy holds each row's second
  // block, and a strided destination (the first half of each row of another tensor) takes them.
  const Tensor cols = q.slice(1, 32, 64).contiguous();
  ASSERT_TRUE(cols.is_contiguous());
  Tensor wide = Tensor::zeros({5, 64}, DType::kQ8_0);
  Tensor first_half = wide.slice(1, 0, 32);
  first_half.copy_from(cols);
  for (int r = 0; r < 5; ++r) {
    const char* block = static_cast<const char*>(q.raw()) + r * 68 + 34;
    EXPECT_EQ(std::memcmp(static_cast<const char*>(cols.raw()) + r * 34, block, 34), 0) << r;
    EXPECT_EQ(std::memcmp(static_cast<const char*>(wide.raw()) + r * 68, block, 34), 0) << r;
  }
}

TEST(CheckedMath, DetectsOverflow) {
  EXPECT_THROW(checked_mul(int64_t(1) << 40, int64_t(1) << 40, "t"), Error);
  EXPECT_THROW(checked_add_u64(~uint64_t(0), 1, "t"), Error);
  EXPECT_EQ(checked_mul(6, 7, "t"), 42);
}

}  // namespace
}  // namespace tensorpar

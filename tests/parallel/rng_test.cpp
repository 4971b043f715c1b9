#include "parallel/rng.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"

namespace tensorpar {
namespace {

TEST(Rng, PhiloxKnownAnswers) {
  // Random123's published known-answer vectors for Philox4x32-10.
  EXPECT_EQ(philox4x32_10({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox4x32_10({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
            (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox4x32_10({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Rng, StreamsAreDeterministicAndDistinct) {
  const RngStream a = replicated_stream(1234, 7), b = replicated_stream(1234, 7);
  const RngStream other_id = replicated_stream(1234, 8), other_seed = replicated_stream(1235, 7);
  int same_id = 0, same_seed = 0;
  for (uint64_t i = 0; i < 100; ++i) {
    EXPECT_EQ(a.normal(i), b.normal(i));
    same_id += a.normal(i) == other_id.normal(i);
    same_seed += a.normal(i) == other_seed.normal(i);
  }
  EXPECT_EQ(same_id, 0);
  EXPECT_EQ(same_seed, 0);
  RngStream s = replicated_stream(1);
  EXPECT_EQ(s.advance(10), 0u);
  EXPECT_EQ(s.advance(5), 10u);
  EXPECT_EQ(s.offset(), 15u);
  EXPECT_NE(tensor_id_of("model.layers.0.mlp.up_proj.weight"),
            tensor_id_of("model.layers.1.mlp.up_proj.weight"));
}

TEST(Rng, Moments) {
  const RngStream s = replicated_stream(42, 1);
  const int n = 200000;
  double sum = 0, sum2 = 0, usum = 0;
  float umin = 1, umax = 0;
  for (int i = 0; i < n; ++i) {
    const double x = s.normal(uint64_t(i));
    sum += x;
    sum2 += x * x;
    const float u = s.uniform(uint64_t(i));
    usum += u;
    umin = std::min(umin, u);
    umax = std::max(umax, u);
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sum2 / n, 1.0, 0.01);
  EXPECT_NEAR(usum / n, 0.5, 0.005);
  EXPECT_GE(umin, 0.0f);
  EXPECT_LT(umax, 1.0f);
}

TEST(Rng, SlicedInitMatchesTheFullMatrix) {
  const Shape full_shape = {7, 5, 3};
  Tensor full = Tensor::empty(full_shape, DType::kF32);
  init_normal_sliced(full, full_shape, 0, Range{0, 7}, 0.02f, 99, 5);
  const auto all = full.to_vector();
  // Element (i,j,k) depends only on seed, tensor id and position.
  const RngStream s = replicated_stream(99, 5);
  for (int64_t i = 0; i < 105; ++i) EXPECT_EQ(all[size_t(i)], 0.02f * s.normal(uint64_t(i)));
  for (int dim = 0; dim < 3; ++dim) {
    const int64_t n = full_shape[size_t(dim)];
    for (int parts = 1; parts <= 4; ++parts)
      for (int r = 0; r < parts; ++r) {
        const Range range = partition_even(n, parts, r);
        Shape local_shape = full_shape;
        local_shape[size_t(dim)] = range.size();
        Tensor local = Tensor::empty(local_shape, DType::kF32);
        init_normal_sliced(local, full_shape, dim, range, 0.02f, 99, 5);
        EXPECT_EQ(local.to_vector(), full.slice(dim, range.begin, range.end).to_vector())
            << "dim " << dim << " parts " << parts << " rank " << r;
      }
  }
  Tensor wrong = Tensor::empty({2, 5, 3}, DType::kF32);
  EXPECT_THROW(init_normal_sliced(wrong, full_shape, 0, Range{0, 3}, 1, 1, 1), Error);
  EXPECT_THROW(init_normal_sliced(wrong, full_shape, 0, Range{6, 8}, 1, 1, 1), Error);
  EXPECT_THROW(init_normal_sliced(wrong, full_shape, 3, Range{0, 2}, 1, 1, 1), Error);
}

TEST(Rng, FillNormalUsesTheOffset) {
  const RngStream s = replicated_stream(3, 0);
  Tensor t = Tensor::empty({33}, DType::kF32);
  fill_normal(t, s, 100, 2.0f);
  const auto v = t.to_vector();
  for (int i = 0; i < 33; ++i) EXPECT_EQ(v[size_t(i)], 2.0f * s.normal(uint64_t(100 + i)));
}

}  // namespace
}  // namespace tensorpar

// RoPE: the forward against a double-precision rotation for both layouts, partial rotary and
// large positions; the llama3 and linear scalings against their definitions; the two layouts
// against each other through the HF->GGUF row permutation; the backward against finite
// differences.
#include "kernels/cpu/rope.h"

#include <cmath>
#include <numbers>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::nan_vec;
using testing::Rng;

// out (T,NH,HS) in double, from the inverse frequencies `inv` (rot/2) and a position scale.
std::vector<double> ref_rope(const std::vector<double>& x, const std::vector<int64_t>& pos,
                             const std::vector<double>& inv, double pos_scale, bool interleaved,
                             int64_t T, int64_t NH, int64_t HS) {
  const int64_t half = static_cast<int64_t>(inv.size());
  std::vector<double> out = x;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const size_t base = static_cast<size_t>((t * NH + h) * HS);
        const size_t a = base + static_cast<size_t>(interleaved ? 2 * i : i);
        const size_t b = base + static_cast<size_t>(interleaved ? 2 * i + 1 : i + half);
        const double ang = static_cast<double>(pos[static_cast<size_t>(t)]) * pos_scale *
                           inv[static_cast<size_t>(i)];
        out[a] = x[a] * std::cos(ang) - x[b] * std::sin(ang);
        out[b] = x[a] * std::sin(ang) + x[b] * std::cos(ang);
      }
  return out;
}

std::vector<double> plain_inv_freq(int64_t rot, double theta) {
  std::vector<double> inv;
  for (int64_t i = 0; i < rot / 2; ++i)
    inv.push_back(1.0 / std::pow(theta, double(2 * i) / double(rot)));
  return inv;
}

std::vector<int64_t> random_positions(Rng& rng, int64_t T, int64_t max_pos) {
  std::vector<int64_t> p(static_cast<size_t>(T));
  for (auto& x : p) x = rng.integer(0, max_pos);
  return p;
}

TEST(Rope, ForwardMatchesDoubleRotation) {
  TP_SEED_TRACE();
  Rng rng(1);
  for (auto layout : {RopeLayout::kHalfSplit, RopeLayout::kInterleaved})
    for (int64_t HS : {2, 8, 64})
      for (int64_t rot : {HS, HS / 2})
        for (int64_t T : {1, 7, 33}) {
          if (rot == 0 || rot % 2) continue;
          const int64_t NH = 3;
          const double theta = 10000;
          const auto table = RopeTable::make(HS, theta, layout, {}, rot);
          // Positions up to 128k: long-context angles must stay accurate.
          const auto pos = random_positions(rng, T, 131072);
          const auto x = rng.uniform_vec(static_cast<size_t>(T * NH * HS));
          const auto want = ref_rope(testing::to_double(x), pos, plain_inv_freq(rot, theta), 1.0,
                                     layout == RopeLayout::kInterleaved, T, NH, HS);
          auto out = nan_vec(x.size());
          rope_forward(out.data(), x.data(), pos.data(), table, T, NH);
          const std::string what =
              std::string(layout == RopeLayout::kInterleaved ? "interleaved" : "half") +
              " HS=" + std::to_string(HS) + " rot=" + std::to_string(rot) +
              " T=" + std::to_string(T);
          expect_close(out, want, 2e-6, 1e-5, what);
          auto inplace = x;
          rope_forward(inplace.data(), inplace.data(), pos.data(), table, T, NH);
          expect_close(inplace, out, 0, 0, "in place " + what);
        }
}

// The rotation forms its angles once per distinct position of a call (a training batch repeats
// the same positions in every sequence) or once per token (positions spread wider than the call):
// either way each token comes out bitwise as when rotated alone, forward and backward.
TEST(Rope, EveryTokenAsWhenRotatedAlone) {
  TP_SEED_TRACE();
  Rng rng(5);
  const int64_t NH = 3, HS = 16;
  const auto table = RopeTable::make(HS, 10000, RopeLayout::kHalfSplit);
  std::vector<int64_t> batch;  // 4 sequences of 9 tokens from position 5 (positions repeat)
  for (int64_t b = 0; b < 4; ++b)
    for (int64_t t = 0; t < 9; ++t) batch.push_back(5 + t);
  for (const auto& pos : {batch, random_positions(rng, 20, 4096), std::vector<int64_t>{7, 7, 7}}) {
    const int64_t T = static_cast<int64_t>(pos.size()), row = NH * HS;
    const auto x = rng.uniform_vec(static_cast<size_t>(T * row));
    auto out = nan_vec(x.size());
    std::vector<float> d_in(x.size(), 0.5f);
    rope_forward(out.data(), x.data(), pos.data(), table, T, NH);
    rope_backward(d_in.data(), x.data(), pos.data(), table, T, NH);
    for (int64_t t = 0; t < T; ++t) {
      auto one = nan_vec(static_cast<size_t>(row));
      std::vector<float> d_one(static_cast<size_t>(row), 0.5f);
      rope_forward(one.data(), x.data() + t * row, &pos[static_cast<size_t>(t)], table, 1, NH);
      rope_backward(d_one.data(), x.data() + t * row, &pos[static_cast<size_t>(t)], table, 1, NH);
      for (int64_t i = 0; i < row; ++i) {
        ASSERT_EQ(one[static_cast<size_t>(i)], out[static_cast<size_t>(t * row + i)]) << "token " << t << " of " << T;
        ASSERT_EQ(d_one[static_cast<size_t>(i)], d_in[static_cast<size_t>(t * row + i)]) << "token " << t << " of " << T;
      }
    }
  }
}

TEST(Rope, Llama3ScalingMatchesDefinition) {
  // Llama 3.1 8B: theta 500000, factor 8, low 1, high 4, original context 8192, HS 128.
  RopeScaling sc;
  sc.type = RopeScalingType::kLlama3;
  sc.factor = 8;
  sc.low_freq_factor = 1;
  sc.high_freq_factor = 4;
  sc.original_max_position_embeddings = 8192;
  const auto table = RopeTable::make(128, 500000, RopeLayout::kHalfSplit, sc);
  const auto inv = plain_inv_freq(128, 500000);
  int n_high = 0, n_low = 0, n_mid = 0;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / inv[i];
    double want;
    if (wavelen < 8192.0 / 4) {  // shorter than the high-frequency wavelength: unchanged
      want = inv[i];
      ++n_high;
    } else if (wavelen > 8192.0 / 1) {  // longer than the low-frequency wavelength: / factor
      want = inv[i] / 8;
      ++n_low;
    } else {  // in between: interpolate between inv/factor and inv by 8192/wavelen
      const double s = (8192.0 / wavelen - 1) / (4 - 1);
      want = (1 - s) * inv[i] / 8 + s * inv[i];
      ++n_mid;
    }
    EXPECT_NEAR(table.inv_freq[i], want, 1e-12 * want) << "i=" << i;
  }
  EXPECT_GT(n_high, 0);
  EXPECT_GT(n_low, 0);
  EXPECT_GT(n_mid, 0);
}

TEST(Rope, LinearScalingDividesPositions) {
  TP_SEED_TRACE();
  Rng rng(2);
  const int64_t T = 7, NH = 2, HS = 16;
  RopeScaling sc;
  sc.type = RopeScalingType::kLinear;
  sc.factor = 4;
  const auto scaled = RopeTable::make(HS, 10000, RopeLayout::kHalfSplit, sc);
  const auto plain = RopeTable::make(HS, 10000, RopeLayout::kHalfSplit);
  auto pos = random_positions(rng, T, 1000);
  std::vector<int64_t> pos4 = pos;
  for (auto& p : pos4) p *= 4;
  const auto x = rng.uniform_vec(static_cast<size_t>(T * NH * HS));
  auto a = nan_vec(x.size()), b = nan_vec(x.size());
  rope_forward(a.data(), x.data(), pos4.data(), scaled, T, NH);
  rope_forward(b.data(), x.data(), pos.data(), plain, T, NH);
  expect_close(a, b, 1e-6, 1e-6, "linear factor 4 at 4p vs none at p");
}

TEST(Rope, InterleavedEqualsHalfSplitUnderTheGgufPermutation) {
  // The HF->GGUF converter reorders each head's rows so that element i of the half-split layout
  // (pair i < HS/2, partner i + HS/2) becomes element 2i (partner 2i+1).
  TP_SEED_TRACE();
  Rng rng(3);
  const int64_t T = 5, NH = 3, HS = 32;
  const auto half = RopeTable::make(HS, 10000, RopeLayout::kHalfSplit);
  const auto inter = RopeTable::make(HS, 10000, RopeLayout::kInterleaved);
  const auto pos = random_positions(rng, T, 4096);
  const auto x = rng.uniform_vec(static_cast<size_t>(T * NH * HS));
  auto perm = [&](const std::vector<float>& v) {  // half-split order -> interleaved order
    std::vector<float> r(v.size());
    for (int64_t row = 0; row < T * NH; ++row)
      for (int64_t i = 0; i < HS / 2; ++i) {
        r[static_cast<size_t>(row * HS + 2 * i)] = v[static_cast<size_t>(row * HS + i)];
        r[static_cast<size_t>(row * HS + 2 * i + 1)] =
            v[static_cast<size_t>(row * HS + i + HS / 2)];
      }
    return r;
  };
  auto a = nan_vec(x.size()), b = nan_vec(x.size());
  rope_forward(a.data(), x.data(), pos.data(), half, T, NH);
  const auto px = perm(x);
  rope_forward(b.data(), px.data(), pos.data(), inter, T, NH);
  expect_close(b, perm(a), 0, 0, "interleaved(perm x) vs perm(half(x))");
}

TEST(Rope, BackwardMatchesFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(4);
  for (auto layout : {RopeLayout::kHalfSplit, RopeLayout::kInterleaved})
    for (int64_t rot : {8, 4}) {
      const int64_t T = 3, NH = 2, HS = 8;
      const auto table = RopeTable::make(HS, 10000, layout, {}, rot);
      const auto pos = random_positions(rng, T, 5000);
      const auto x = testing::to_double(rng.uniform_vec(static_cast<size_t>(T * NH * HS)));
      const auto dy = rng.uniform_vec(x.size());
      const auto inv = plain_inv_freq(rot, 10000);
      const auto want = testing::numeric_grad(
          [&](const std::vector<double>& v) {
            return testing::weighted_sum(
                ref_rope(v, pos, inv, 1.0, layout == RopeLayout::kInterleaved, T, NH, HS),
                testing::to_double(dy));
          },
          x);
      const auto d0 = rng.uniform_vec(x.size());
      auto dx = d0;
      rope_backward(dx.data(), dy.data(), pos.data(), table, T, NH);
      expect_close(dx, testing::plus(d0, want), 1e-5, 1e-5, "d_inp rot=" + std::to_string(rot));
    }
}

TEST(Rope, BadTablesAreErrors) {
  EXPECT_THROW(RopeTable::make(8, 10000, RopeLayout::kHalfSplit, {}, 7), Error);
  EXPECT_THROW(RopeTable::make(8, 10000, RopeLayout::kHalfSplit, {}, 10), Error);
  EXPECT_THROW(RopeTable::make(0, 10000, RopeLayout::kHalfSplit), Error);
  RopeScaling sc;
  sc.type = RopeScalingType::kLlama3;
  sc.low_freq_factor = 4;
  sc.high_freq_factor = 1;
  EXPECT_THROW(RopeTable::make(8, 10000, RopeLayout::kHalfSplit, sc), Error);
}

}  // namespace
}  // namespace tensorpar

// Float weights (f32, bf16, f16) in K-major panels (panel_matmul.h): the packing is exact and
// invertible, the kernel is bitwise its one-output-at-a-time oracle (a std::fma chain over k, then
// + bias) for every row count, group remainder, K tail, bias and stride, and close to the
// double-precision naive matmul; a row's result is the same alone, in any batch and on any thread
// count; the inference dispatch runs it and training refuses the layout.
//
// Tolerance vs the naive double-precision reference: a K-term f32 chain of products of values in
// [-1, 1]: 1e-6 * K + 1e-5 absolute (16-bit weights are widened exactly, f32 ones used as they
// are).
#include "kernels/cpu/panel_matmul.h"

#include <omp.h>

#include <cstring>
#include <vector>

#include "core/half.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/packed_weights.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::nan_tensor;
using testing::Rng;

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<uint8_t> bits_of(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<uint8_t> out(size_t(c.nbytes()));
  std::memcpy(out.data(), c.raw(), out.size());
  return out;
}

constexpr DType kTypes[] = {DType::kF32, DType::kBF16, DType::kF16};

#define SKIP_WITHOUT_KERNEL() \
  if (!panels_usable()) GTEST_SKIP() << "this CPU lacks AVX2, FMA or F16C"

// Rows not a multiple of 64 (the last group padded), K from 1, a strided source: unpacking gives
// back the exact bits, and a packed row widened is the plain row widened.
TEST(PanelMatmul, PackingIsExactAndInvertible) {
  Rng rng(1);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (const DType t : kTypes)
    for (const int64_t N : {1, 63, 64, 65, 130})
      for (const int64_t K : {1, 7, 128, 300}) {
        SCOPED_TRACE(std::string(dtype_name(t)) + " N=" + std::to_string(N) +
                     " K=" + std::to_string(K));
        const Tensor wide = rng.uniform_tensor({N, K + 5}, t);
        const Tensor w = wide.slice(1, 2, K + 2);  // row stride K + 5
        const Tensor p = pack_panels(w);
        EXPECT_EQ(p.dtype(), t == DType::kBF16   ? DType::kBF16x64
                             : t == DType::kF16 ? DType::kF16x64
                                                : DType::kF32x64);
        EXPECT_EQ(p.shape(), w.shape());
        const Tensor back = unpack_panels(p);
        EXPECT_EQ(back.dtype(), t);
        EXPECT_EQ(bits_of(back), bits_of(w));
        std::vector<float> got(static_cast<size_t>(K));
        for (const int64_t r : {int64_t(0), N / 2, N - 1}) {
          panel_row_f32(p, r, got.data());
          EXPECT_EQ(got, w.slice(0, r, r + 1).contiguous().to_vector()) << "row " << r;
        }
        EXPECT_THROW(panel_row_f32(p, N, got.data()), Error);
        EXPECT_THROW(p.to_vector(), Error);
      }
}

TEST(PanelMatmul, BitwiseTheOracleAndCloseToNaive) {
  SKIP_WITHOUT_KERNEL();
  Rng rng(2);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (const DType t : kTypes)
    // M: each remainder of the 6-row block, one and several 96-row items; N: group remainders;
    // K: the passes (128 values of k for 16-bit weights, 64 for f32) and their tails.
    for (const int64_t M : {1, 2, 3, 4, 5, 6, 7, 13, 97, 200})
      for (const int64_t N : {5, 64, 70, 130})
        for (const int64_t K : {1, 17, 64, 65, 128, 129, 300}) {
          if (M > 13 && (N < 70 || K == 1 || K == 17))
            continue;  // the large M cases where they matter
          SCOPED_TRACE(std::string(dtype_name(t)) + " M=" + std::to_string(M) +
                       " N=" + std::to_string(N) + " K=" + std::to_string(K));
          const Tensor x = rng.uniform_tensor({M, K + 3}).slice(1, 1, K + 1);  // row stride K + 3
          const Tensor w = rng.uniform_tensor({N, K}, t);
          const Tensor b = rng.uniform_tensor({N});
          const Tensor p = pack_panels(w);
          for (const Tensor* bias : {&b, static_cast<const Tensor*>(nullptr)}) {
            Tensor got_wide = nan_tensor({M, N + 2});
            Tensor got =
                got_wide.slice(1, 0, N);  // row stride N + 2; the 2 columns beyond stay NaN
            Tensor want = nan_tensor({M, N}), naive = nan_tensor({M, N});
            panel_matmul_forward(got, x, p, bias);
            panel_matmul_reference(want, x, w, bias);
            matmul_forward_naive(naive, x, w, bias);
            EXPECT_TRUE(bitwise_equal(got.contiguous().to_vector(), want.to_vector()))
                << (bias ? "bias" : "no bias");
            EXPECT_LE(testing::max_abs_diff(want.to_vector(), naive.to_vector()),
                      1e-6 * double(K) + 1e-5);
            for (float v : got_wide.slice(1, N, N + 2).contiguous().to_vector())
              EXPECT_TRUE(std::isnan(v));
          }
        }
}

TEST(PanelMatmul, RowsAreBatchInvariant) {
  SKIP_WITHOUT_KERNEL();
  Rng rng(3);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int64_t K = 173, N = 150, M = 101;  // two row items, a part group
  for (const DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor x = rng.uniform_tensor({M, K});
    const Tensor p = pack_panels(rng.uniform_tensor({N, K}, t));
    Tensor all = nan_tensor({M, N});
    panel_matmul_forward(all, x, p, nullptr);
    const auto row = [](const Tensor& t, int64_t r) {
      return t.slice(0, r, r + 1).contiguous().to_vector();
    };
    for (int64_t r = 0; r < M; r += 7) {
      Tensor one = nan_tensor({1, N});
      panel_matmul_forward(one, x.slice(0, r, r + 1), p, nullptr);
      EXPECT_TRUE(bitwise_equal(row(one, 0), row(all, r))) << "row " << r << " alone";
      const int64_t m0 = std::max<int64_t>(0, r - 1 - r % 5);
      Tensor some = nan_tensor({r + 1 - m0, N});
      panel_matmul_forward(some, x.slice(0, m0, r + 1), p, nullptr);
      EXPECT_TRUE(bitwise_equal(row(some, r - m0), row(all, r)))
          << "row " << r << " in rows [" << m0 << ", " << r + 1 << ")";
    }
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    Tensor single = nan_tensor({M, N});
    panel_matmul_forward(single, x, p, nullptr);
    omp_set_num_threads(saved);
    EXPECT_TRUE(bitwise_equal(single.to_vector(), all.to_vector()));
  }
}

// Inference (row-invariant) multiplies a panel-packed weight with the panel kernel; training
// refuses it with an error naming the layout. row_packed_as packs bf16 exactly where this CPU
// prefers panels, whatever the int8 switch.
TEST(PanelMatmul, EngineDispatchAndPacking) {
  SKIP_WITHOUT_KERNEL();
  Rng rng(4);
  for (const DType t : kTypes) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor w = rng.uniform_tensor({70, 40}, t);
    const Tensor x = rng.uniform_tensor({3, 40});
    const Tensor p = pack_panels(w);
    MatmulEngine eng;
    eng.set_row_invariant(true);
    Tensor got = nan_tensor({3, 70}), want = nan_tensor({3, 70});
    matmul_forward(eng, got, x, p, nullptr);
    panel_matmul_forward(want, x, p, nullptr);
    EXPECT_TRUE(bitwise_equal(got.to_vector(), want.to_vector()));
    MatmulEngine train;
    EXPECT_THROW(matmul_forward(train, got, x, p, nullptr), Error);
    for (const bool int8_on : {true, false}) {
      const Tensor q = row_packed_as(w, int8_on);
      EXPECT_EQ(q.dtype(), panels_preferred() ? p.dtype() : t);
    }
  }
}

TEST(PanelMatmul, RejectsBadOperands) {
  SKIP_WITHOUT_KERNEL();
  const Tensor w = Tensor::zeros({70, 8}, DType::kBF16);
  const Tensor p = pack_panels(w);
  Tensor x = Tensor::zeros({2, 8}, DType::kF32), out = Tensor::zeros({2, 70}, DType::kF32);
  EXPECT_THROW(panel_matmul_forward(out, x, w, nullptr), Error);  // not packed
  Tensor x9 = Tensor::zeros({2, 9}, DType::kF32);
  EXPECT_THROW(panel_matmul_forward(out, x9, p, nullptr), Error);  // K mismatch
  Tensor out69 = Tensor::zeros({2, 69}, DType::kF32);
  EXPECT_THROW(panel_matmul_forward(out69, x, p, nullptr), Error);  // N mismatch
  const Tensor bad_bias = Tensor::zeros({69}, DType::kF32);
  EXPECT_THROW(panel_matmul_forward(out, x, p, &bad_bias), Error);
  EXPECT_THROW(pack_panels(Tensor::zeros({3, 8}, DType::kI32)), Error);
  EXPECT_THROW(pack_panels(Tensor::zeros({3, 32}, DType::kQ8_0)), Error);
  EXPECT_THROW(panel_matmul_reference(out, x, p, nullptr),
               Error);                     // the oracle takes the plain layout
  EXPECT_THROW(p.slice(0, 8, 70), Error);  // rows only from a group's start
  EXPECT_NO_THROW(p.slice(0, 64, 70));
  EXPECT_THROW(p.slice(1, 0, 4), Error);
}

}  // namespace
}  // namespace tensorpar

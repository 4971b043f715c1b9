// The row-invariant inference matmul: rowwise_matmul_forward (float weights) against the naive
// reference, and the property it exists for: a row's output is bitwise the same whether it is
// multiplied alone or among other rows, at any position in the batch, with any thread count.
// Quantized weights (every GGUF block type), which inference multiplies here too, are held to the
// same property.
//
// Tolerance vs the naive double-precision reference: a K-term f32 dot product of values in
// [-1, 1]: 1e-6 * K + 1e-5 absolute (f32 weights; bf16/f16 weights are widened exactly).
#include "kernels/cpu/rowwise_matmul.h"

#include <omp.h>

#include <cstring>
#include <vector>

#include "core/quant.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "quant_test_util.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::nan_tensor;
using testing::Rng;

using Kernel = void (*)(Tensor&, const Tensor&, const Tensor&, const Tensor*);

std::vector<float> row(const Tensor& t, int64_t r) {
  return t.slice(0, r, r + 1).contiguous().to_vector();
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(RowwiseMatmul, MatchesNaive) {
  Rng rng(1);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (Kernel k : {&rowwise_matmul_forward, &rowwise_matmul_forward_portable})
    for (DType wt : {DType::kF32, DType::kBF16, DType::kF16})
      for (int64_t K : {1, 15, 16, 17, 64, 200})
        for (int64_t M : {1, 3, 4, 9})
          for (int64_t N : {7, 45}) {  // 45: a whole 32-row tile and a part one
            SCOPED_TRACE(std::string(dtype_name(wt)) + " M=" + std::to_string(M) +
                         " N=" + std::to_string(N) + " K=" + std::to_string(K));
            const Tensor x = rng.uniform_tensor({M, K});
            const Tensor w = rng.uniform_tensor({N, K}, wt);
            const Tensor b = rng.uniform_tensor({N});
            Tensor got = nan_tensor({M, N}), want = nan_tensor({M, N});
            k(got, x, w, &b);
            matmul_forward_naive(want, x, w, &b);
            EXPECT_LE(testing::max_abs_diff(got.to_vector(), want.to_vector()),
                      1e-6 * double(K) + 1e-5);
          }
}

TEST(RowwiseMatmul, RowsAreBatchInvariant) {
  Rng rng(2);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int64_t K = 173, N = 37, M = 13;
  for (Kernel k : {&rowwise_matmul_forward, &rowwise_matmul_forward_portable})
    for (DType wt : {DType::kF32, DType::kBF16}) {
      const Tensor x = rng.uniform_tensor({M, K});
      const Tensor w = rng.uniform_tensor({N, K}, wt);
      Tensor all = nan_tensor({M, N});
      k(all, x, w, nullptr);
      for (int64_t r = 0; r < M; ++r) {
        // Alone, and as the last row of a 2..5-row batch that starts elsewhere.
        Tensor one = nan_tensor({1, N});
        k(one, x.slice(0, r, r + 1), w, nullptr);
        EXPECT_TRUE(bitwise_equal(row(one, 0), row(all, r))) << "row " << r << " alone";
        const int64_t m0 = std::max<int64_t>(0, r - 1 - r % 4);
        Tensor some = nan_tensor({r + 1 - m0, N});
        k(some, x.slice(0, m0, r + 1), w, nullptr);
        EXPECT_TRUE(bitwise_equal(row(some, r - m0), row(all, r)))
            << "row " << r << " in rows [" << m0 << ", " << r + 1 << ")";
      }
      // One thread gives the same bits as the team.
      const int saved = omp_get_max_threads();
      omp_set_num_threads(1);
      Tensor single = nan_tensor({M, N});
      k(single, x, w, nullptr);
      omp_set_num_threads(saved);
      EXPECT_TRUE(bitwise_equal(single.to_vector(), all.to_vector()));
    }
}

// Every block-quantized type: one or two rows (legacy blocks dequantized in registers) and many
// rows (weights dequantized into the tile's buffer) give the same bits, on both ISAs' paths; both
// match the naive reference. Weights have random blocks (quant_test_util.h), |w| <= 1.5.
TEST(RowwiseMatmul, QuantizedRowsAreBatchInvariant) {
  Rng rng(3);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int64_t K = 512, N = 45, M = 11;  // a whole 32-row tile and a part one
  for (Kernel k : {&rowwise_matmul_forward, &rowwise_matmul_forward_portable})
    for (DType t : testing::kAllQuantTypes) {
      SCOPED_TRACE(dtype_name(t));
      const Tensor w = testing::random_blocks(rng, N, K, t);
      const Tensor x = rng.uniform_tensor({M, K});
      Tensor all = nan_tensor({M, N});
      k(all, x, w, nullptr);
      for (int64_t r = 0; r < M; ++r) {
        Tensor one = nan_tensor({1, N});
        k(one, x.slice(0, r, r + 1), w, nullptr);
        EXPECT_TRUE(bitwise_equal(row(one, 0), row(all, r))) << " row " << r;
        const int64_t m0 = std::max<int64_t>(0, r - 1);
        Tensor two = nan_tensor({r + 1 - m0, N});
        k(two, x.slice(0, m0, r + 1), w, nullptr);
        EXPECT_TRUE(bitwise_equal(row(two, r - m0), row(all, r))) << " row " << r << " of two";
      }
      Tensor want = nan_tensor({M, N});
      matmul_forward_naive(want, x, w, nullptr);
      EXPECT_LE(testing::max_abs_diff(all.to_vector(), want.to_vector()),
                1.5e-6 * double(K) + 1e-5);
    }
}

// The SIMD paths run each dot's 16 lanes with the portable loop's fma sequence and reduction tree
// (AVX-512 in one vector, AVX2 as two 8-lane halves), so for float weights their results are the
// portable loop's bits, for every tail length and row count (which makes the portable loop the
// SIMD paths' exact oracle). The AVX2 path also dequantizes blocks with dequantize_row, as the
// portable loop does, so there every quantized type is bitwise too (the AVX-512 path dequantizes
// in registers, which may differ in the last bits).
TEST(RowwiseMatmul, SimdPathIsBitwiseThePortableLoop) {
  const bool avx512 = quant_detail::cpu_has_avx512();
  if (!avx512 && !quant_detail::cpu_has_avx2()) GTEST_SKIP() << "no SIMD path on this CPU";
  Rng rng(4);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  std::vector<DType> types = {DType::kF32, DType::kBF16, DType::kF16};
  if (!avx512)
    types.insert(types.end(), std::begin(testing::kAllQuantTypes),
                 std::end(testing::kAllQuantTypes));
  for (const DType wt : types)
    for (const int64_t M : {1, 2, 3, 4, 5, 7, 8}) {
      const bool quant = dtype_is_quantized(wt);
      for (const int64_t K :
           quant ? std::vector<int64_t>{256, 512} : std::vector<int64_t>{1, 15, 16, 17, 200}) {
        SCOPED_TRACE(std::string(dtype_name(wt)) + " M=" + std::to_string(M) +
                     " K=" + std::to_string(K));
        const int64_t N = 45;  // a whole 32-row tile and a part one, odd blocks
        const Tensor x = rng.uniform_tensor({M, K});
        const Tensor w =
            quant ? testing::random_blocks(rng, N, K, wt) : rng.uniform_tensor({N, K}, wt);
        const Tensor b = rng.uniform_tensor({N});
        Tensor simd = nan_tensor({M, N}), portable = nan_tensor({M, N});
        rowwise_matmul_forward(simd, x, w, &b);
        rowwise_matmul_forward_portable(portable, x, w, &b);
        EXPECT_TRUE(bitwise_equal(simd.to_vector(), portable.to_vector()));
      }
    }
}

// The inference dispatch (MatmulEngine in row-invariant mode, int8 activations off) runs the
// same kernel.
TEST(RowwiseMatmul, EngineDispatchesQuantizedWeights) {
  Rng rng(4);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  MatmulEngine eng;
  eng.set_row_invariant(true);
  eng.set_int8_activations(false);
  for (DType t : {DType::kQ4_0, DType::kQ5_0, DType::kQ4_K, DType::kQ6_K}) {
    const Tensor w = testing::random_blocks(rng, 9, 256, t);
    const Tensor x = rng.uniform_tensor({3, 256});
    Tensor got = nan_tensor({3, 9}), want = nan_tensor({3, 9});
    matmul_forward(eng, got, x, w, nullptr);
    rowwise_matmul_forward(want, x, w, nullptr);
    EXPECT_TRUE(bitwise_equal(got.to_vector(), want.to_vector())) << dtype_name(t);
  }
}

TEST(RowwiseMatmul, RejectsBadShapes) {
  Tensor x = Tensor::zeros({2, 8}, DType::kF32), w = Tensor::zeros({3, 9}, DType::kF32),
         out = Tensor::zeros({2, 3}, DType::kF32);
  EXPECT_THROW(rowwise_matmul_forward(out, x, w, nullptr), Error);
  Tensor w2 = Tensor::zeros({3, 8}, DType::kF32), out2 = Tensor::zeros({2, 4}, DType::kF32);
  EXPECT_THROW(rowwise_matmul_forward(out2, x, w2, nullptr), Error);
}

}  // namespace
}  // namespace tensorpar

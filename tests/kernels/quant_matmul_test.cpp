// Quantized-weight matmul (every block-quantized DType: legacy 32-weight blocks and K-quant
// super-blocks) against the naive reference on the dequantized weight: the fused kernel on every
// ISA this CPU has, the tiled oneDNN path, strided weights, accumulation, backward to the input,
// the matmul_forward dispatch, and the SIMD dequantizers against the scalar reference.
//
// Tolerances (inputs uniform in [-1, 1], dequantized weights within [-1.5, 1.5]):
// - f32 activations: the fused kernel and the f32 tiles see exactly the reference's weights up to
//   one rounding of q*d+m, so a K-term f32 sum: 1e-6 * K + 1e-5 absolute.
// - bf16 activations with the tiled path: weights are rounded to bf16 (relative 2^-9 each), a
//   random-sign sum of K such errors: 4e-3 * sqrt(K) + 1e-5 absolute.
#include <cmath>
#include <vector>

#include "core/quant.h"
#include "kernels/cpu/quant_matmul.h"
#include "kernels/cpu/quant_matmul_kernels.h"
#include "quant_test_util.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::kAllQuantTypes;
using testing::nan_tensor;
using testing::random_blocks;
using testing::Rng;

Tensor random_quant(Rng& rng, int64_t n, int64_t k, DType t) {
  const std::vector<float> v = rng.uniform_vec(size_t(n * k));
  Tensor w = Tensor::empty({n, k}, t);
  quantize_row(w.raw(), v.data(), t, n * k);
  return w;
}

// Sanitized builds run ~10x slower: smaller sweeps there.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

double f32_tol(int64_t K) { return 1e-6 * double(K) + 1e-5; }
double bf16_tol(int64_t K) { return 4e-3 * std::sqrt(double(K)) + 1e-5; }

double err(const Tensor& got, const Tensor& want) {
  return testing::max_abs_diff(got.to_vector(), want.to_vector());
}

// Reduction lengths: a few blocks, and (unsanitized) a length past 512 for the K-quants too.
std::vector<int64_t> test_ks(DType t) {
  if (dtype_is_kquant(t)) return {256, kSanitized ? 512 : 768};
  return {32, 96, kSanitized ? 160 : 608};
}

TEST(QuantMatmul, FusedMatchesNaiveOnEveryIsa) {
  TP_SEED_TRACE();
  Rng rng(11);
  MatmulEngine eng;
  // The naive reference once per case, every ISA against it.
  for (const DType t : kAllQuantTypes) {
    for (const int64_t M : {1, 3, 7}) {
      for (const int64_t N : {int64_t(1), int64_t(33), kSanitized ? int64_t(65) : int64_t(577)}) {
        for (const int64_t K : test_ks(t)) {
          const Tensor w = random_blocks(rng, N, K, t);
          const Tensor in = rng.uniform_tensor({M, K});
          const Tensor bias = rng.uniform_tensor({N});
          Tensor want = nan_tensor({M, N});
          matmul_forward_naive(want, in, w, &bias);
          for (const QuantIsa isa : {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512}) {
            if (!quant_isa_supported(isa)) continue;
            SCOPED_TRACE(::testing::Message() << "isa=" << int(isa) << " " << dtype_name(t) << " M=" << M
                                              << " N=" << N << " K=" << K);
            Tensor out = nan_tensor({M, N});
            quant_matmul_forward_fused(eng, out, in, w, &bias, isa);
            ASSERT_LE(err(out, want), f32_tol(K));
          }
        }
      }
    }
  }
}

TEST(QuantMatmul, Bf16ActivationsAndOutput) {
  TP_SEED_TRACE();
  Rng rng(12);
  MatmulEngine eng;
  for (const DType t : kAllQuantTypes) {
    const int64_t M = 1, N = 33, K = dtype_is_kquant(t) ? 256 : 96;
    const Tensor w = random_blocks(rng, N, K, t);
    const Tensor in = rng.uniform_tensor({M, K}, DType::kBF16);
    Tensor out = nan_tensor({M, N}, DType::kBF16), want = nan_tensor({M, N});
    matmul_forward(eng, out, in, w, nullptr);
    matmul_forward_naive(want, in, w, nullptr);
    // One bf16 rounding of the output on top of the f32 bound.
    const auto g = out.to_vector(), e = want.to_vector();
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], e[i], f32_tol(K) + std::fabs(e[i]) / 256) << dtype_name(t) << " at " << i;
  }
}

TEST(QuantMatmul, TiledMatchesNaive) {
  TP_SEED_TRACE();
  Rng rng(13);
  MatmulEngine eng;
  for (const DType t : kAllQuantTypes) {
    for (const DType at : {DType::kF32, DType::kBF16}) {
      // N = 577 with K = 2048 spans several 2 MiB tiles (a ragged last one; K = 512 under ASan:
      // one tile).
      for (const auto& [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{9, 33, 256}, {33, 577, kSanitized ? 512 : 2048}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " acts " << dtype_name(at) << " M=" << M
                                          << " N=" << N << " K=" << K);
        const Tensor w = random_blocks(rng, N, K, t);
        const Tensor in = rng.uniform_tensor({M, K}, at);
        const Tensor bias = rng.uniform_tensor({N});
        Tensor out = nan_tensor({M, N}), want = nan_tensor({M, N});
        quant_matmul_forward_tiled(eng, out, in, w, &bias);
        matmul_forward_naive(want, in, w, &bias);
        EXPECT_LE(err(out, want), at == DType::kF32 ? f32_tol(K) : bf16_tol(K));
      }
    }
  }
}

TEST(QuantMatmul, DispatchStridedWeightAndAccumulate) {
  TP_SEED_TRACE();
  Rng rng(14);
  MatmulEngine eng;
  for (const DType t : kAllQuantTypes) {
    // A column slice at block boundaries (a row-parallel shard): 5 blocks per row, the middle 2.
    const int64_t be = dtype_block_elems(t), K = 2 * be;
    const Tensor full = random_blocks(rng, 7, 5 * be, t);
    const Tensor w = full.slice(1, be, 3 * be);
    for (const int64_t M : {1, 33}) {
      const Tensor in = rng.uniform_tensor({M, K});
      Tensor out = nan_tensor({M, 7}), want = nan_tensor({M, 7});
      matmul_forward(eng, out, in, w, nullptr);
      matmul_forward_naive(want, in, w, nullptr);
      EXPECT_LE(err(out, want), f32_tol(K)) << dtype_name(t) << " M=" << M;
      // beta = 1 accumulates onto out.
      const Tensor start = rng.uniform_tensor({M, 7});
      Tensor acc = start.clone();
      quant_matmul_forward(eng, acc, in, w, nullptr, 1.0f);
      const auto a = acc.to_vector(), s = start.to_vector(), e = want.to_vector();
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], s[i] + e[i], f32_tol(K)) << i;
    }
  }
}

TEST(QuantMatmul, BackwardInputMatchesNaive) {
  TP_SEED_TRACE();
  Rng rng(15);
  MatmulEngine eng;
  for (const DType t : kAllQuantTypes) {
    const int64_t M = 7, N = 33, K = dtype_is_kquant(t) ? 256 : 96;
    const Tensor w = random_blocks(rng, N, K, t);
    const Tensor in = rng.uniform_tensor({M, K});
    const Tensor g = rng.uniform_tensor({M, N});
    const Tensor d0 = rng.uniform_tensor({M, K});
    Tensor dx = d0.clone(), want = d0.clone();
    matmul_backward(eng, &dx, nullptr, nullptr, g, in, w);
    matmul_backward_naive(&want, nullptr, nullptr, g, in, w);
    EXPECT_LE(err(dx, want), f32_tol(N)) << dtype_name(t);
    Tensor dw = Tensor::zeros({N, K}, DType::kF32);
    EXPECT_THROW(matmul_backward(eng, nullptr, &dw, nullptr, g, in, w), Error);
  }
}

// The AVX-512 dequantizers (tiles, K-quant super-blocks) give the scalar reference's values:
// bitwise for K-quants and types without an offset (the same products), within one rounding of
// q*d+m for q4_1/q5_1 (one fma against a multiply and an add).
TEST(QuantMatmul, SimdDequantizeMatchesReference) {
  if (!quant_isa_supported(QuantIsa::kAvx512)) GTEST_SKIP() << "no AVX-512";
  TP_SEED_TRACE();
  Rng rng(17);
  for (const DType t : kAllQuantTypes) {
    SCOPED_TRACE(dtype_name(t));
    const int64_t K = 4 * kKQuantBlock;
    const Tensor w = random_blocks(rng, 1, K, t);
    std::vector<float> want(static_cast<size_t>(K)), got(static_cast<size_t>(K), std::nanf(""));
    dequantize_row(want.data(), w.raw(), t, K);
    quant_detail::dequant_f32_avx512(got.data(), w.raw(), t, K / dtype_block_elems(t));
    for (int64_t i = 0; i < K; ++i) {
      if (quant_detail::quant_has_offset(t))
        ASSERT_NEAR(got[size_t(i)], want[size_t(i)], 1e-6 * (std::fabs(want[size_t(i)]) + 1)) << i;
      else
        ASSERT_EQ(got[size_t(i)], want[size_t(i)]) << i;
    }
    std::vector<bf16> half(static_cast<size_t>(K));
    quant_detail::dequant_bf16_avx512(half.data(), w.raw(), t, K / dtype_block_elems(t));
    for (int64_t i = 0; i < K; ++i) ASSERT_EQ(half[size_t(i)].bits, f32_to_bf16(got[size_t(i)]).bits) << i;
  }
}

TEST(QuantMatmul, BadWeightThrows) {
  MatmulEngine eng;
  Rng rng(16);
  const Tensor w = random_quant(rng, 4, 64, DType::kQ4_1);
  const Tensor in = rng.uniform_tensor({2, 32});
  Tensor out = nan_tensor({2, 4});
  EXPECT_THROW(matmul_forward(eng, out, in, w, nullptr), Error);
  const Tensor in2 = rng.uniform_tensor({2, 64});
  Tensor out_bad = nan_tensor({2, 5});
  EXPECT_THROW(matmul_forward(eng, out_bad, in2, w, nullptr), Error);
}

}  // namespace
}  // namespace tensorpar

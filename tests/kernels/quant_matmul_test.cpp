// Quantized-weight matmul (q8_0 / q4_0 / q4_1) against the naive reference on the dequantized
// weight: the fused kernel on every ISA this CPU has, the tiled oneDNN path, strided weights,
// accumulation, backward to the input, and the matmul_forward dispatch.
//
// Tolerances (inputs uniform in [-1, 1], dequantized weights within [-1.1, 1.1]):
// - f32 activations: the fused kernel and the f32 tiles see exactly the reference's weights up to
//   one rounding of q*d+m, so a K-term f32 sum: 1e-6 * K + 1e-5 absolute.
// - bf16 activations with the tiled path: weights are rounded to bf16 (relative 2^-9 each), a
//   random-sign sum of K such errors: 4e-3 * sqrt(K) + 1e-5 absolute.
#include <cmath>
#include <vector>

#include "core/quant.h"
#include "kernels/cpu/quant_matmul.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::nan_tensor;
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

const DType kQuantTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1};

TEST(QuantMatmul, FusedMatchesNaiveOnEveryIsa) {
  TP_SEED_TRACE();
  Rng rng(11);
  MatmulEngine eng;
  for (const QuantIsa isa : {QuantIsa::kScalar, QuantIsa::kAvx2, QuantIsa::kAvx512}) {
    if (!quant_isa_supported(isa)) continue;
    for (const DType t : kQuantTypes) {
      for (const int64_t M : {1, 3, 7}) {
        for (const int64_t N : {int64_t(1), int64_t(33), kSanitized ? int64_t(65) : int64_t(577)}) {
          for (const int64_t K : {int64_t(32), int64_t(96), kSanitized ? int64_t(160) : int64_t(608)}) {
            SCOPED_TRACE(::testing::Message() << "isa=" << int(isa) << " " << dtype_name(t) << " M=" << M
                                              << " N=" << N << " K=" << K);
            const Tensor w = random_quant(rng, N, K, t);
            const Tensor in = rng.uniform_tensor({M, K});
            const Tensor bias = rng.uniform_tensor({N});
            Tensor out = nan_tensor({M, N}), want = nan_tensor({M, N});
            quant_matmul_forward_fused(eng, out, in, w, &bias, isa);
            matmul_forward_naive(want, in, w, &bias);
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
  for (const DType t : kQuantTypes) {
    const int64_t M = 1, N = 33, K = 96;
    const Tensor w = random_quant(rng, N, K, t);
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
  for (const DType t : kQuantTypes) {
    for (const DType at : {DType::kF32, DType::kBF16}) {
      // N = 577 with K = 2048 spans several 2 MiB tiles (a ragged last one; K = 512 under ASan:
      // one tile).
      for (const auto& [M, N, K] : {std::tuple<int64_t, int64_t, int64_t>{9, 33, 96}, {33, 577, kSanitized ? 512 : 2048}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " acts " << dtype_name(at) << " M=" << M
                                          << " N=" << N << " K=" << K);
        const Tensor w = random_quant(rng, N, K, t);
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
  for (const DType t : kQuantTypes) {
    // A column slice at block boundaries (a row-parallel shard): row stride 160, K_local 64.
    const Tensor full = random_quant(rng, 7, 160, t);
    const Tensor w = full.slice(1, 32, 96);
    for (const int64_t M : {1, 33}) {
      const Tensor in = rng.uniform_tensor({M, 64});
      Tensor out = nan_tensor({M, 7}), want = nan_tensor({M, 7});
      matmul_forward(eng, out, in, w, nullptr);
      matmul_forward_naive(want, in, w, nullptr);
      EXPECT_LE(err(out, want), f32_tol(64)) << dtype_name(t) << " M=" << M;
      // beta = 1 accumulates onto out.
      const Tensor start = rng.uniform_tensor({M, 7});
      Tensor acc = start.clone();
      quant_matmul_forward(eng, acc, in, w, nullptr, 1.0f);
      const auto a = acc.to_vector(), s = start.to_vector(), e = want.to_vector();
      for (size_t i = 0; i < a.size(); ++i) ASSERT_NEAR(a[i], s[i] + e[i], f32_tol(64)) << i;
    }
  }
}

TEST(QuantMatmul, BackwardInputMatchesNaive) {
  TP_SEED_TRACE();
  Rng rng(15);
  MatmulEngine eng;
  for (const DType t : kQuantTypes) {
    const int64_t M = 7, N = 33, K = 96;
    const Tensor w = random_quant(rng, N, K, t);
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

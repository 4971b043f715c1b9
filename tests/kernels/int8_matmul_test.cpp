// The int8-activation matmul (int8_matmul.h) of every weight type it covers: the 8-bit rounding
// rule on its own, each kernel this CPU runs (AVX512-VNNI, AVX2) against the naive reference
// (activations rounded by the same rule and dequantized, weights dequantized, float64 dots), the
// extreme codes where AVX2's 16-bit pair sums are closest to overflowing, batch invariance at any
// thread count, strided weights, and bad operands. The kernel tests skip on a CPU without AVX2
// (the reference and the rounding rule are still checked there).
//
// Tolerances: inputs uniform in [-1, 1], dequantized weights within about [-1.5, 1.5] (random
// blocks, quant_test_util.h); the kernel's integer sums are exact and its f32 scaling and
// accumulation of K terms round like any f32 dot: 1e-6 * K + 1e-5 absolute.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/rowwise_matmul.h"
#include "quant_test_util.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::nan_tensor;
using testing::Rng;

constexpr DType kInt8Types[] = {DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,  DType::kQ5_1, DType::kQ8_0,
                                DType::kIQ4_NL, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

double tol(int64_t K) { return 1e-6 * double(K) + 1e-5; }

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<float> row(const Tensor& t, int64_t r) { return t.slice(0, r, r + 1).contiguous().to_vector(); }

// A kernel call with its own aligned scratch (the CPU's best kernel unless one is named).
void run_int8(Tensor& out, const Tensor& in, const Tensor& w, const Tensor* bias,
              std::optional<Int8Kernel> kernel = std::nullopt) {
  const int64_t bytes = int8_matmul_scratch_bytes(in.dim(0), in.dim(1), w.dtype());
  std::vector<char> buf(static_cast<size_t>(bytes + 64));
  void* p = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
  if (kernel) int8_matmul_forward(out, in, w, bias, p, *kernel);
  else int8_matmul_forward(out, in, w, bias, p);
}

std::string label(Int8Kernel kernel, DType t) {
  std::string s = int8_kernel_name(kernel);
  s.append(" ").append(dtype_name(t));
  return s;
}

constexpr const char* kNoKernel = "this CPU has no int8 kernel (AVX2 with FMA and F16C)";

// The kernels' word-parallel unpacking of a Q4_K/Q5_K super-block's 12 packed scale bytes gives
// kquant_scale_min's 8 scales and 8 mins, for random bytes and for every single set bit.
TEST(Int8Matmul, KQuantScalesMinsAtOnceAreTheReference) {
  Rng rng(20);
  auto check = [](const uint8_t* s) {
    uint64_t sc8 = 0, mn8 = 0;
    kquant_scales_mins(s, sc8, mn8);
    for (int j = 0; j < 8; ++j) {
      int sc = 0, mn = 0;
      kquant_scale_min(s, j, sc, mn);
      ASSERT_EQ(int((sc8 >> (8 * j)) & 0xff), sc) << "sub-block " << j;
      ASSERT_EQ(int((mn8 >> (8 * j)) & 0xff), mn) << "sub-block " << j;
    }
  };
  uint8_t s[12];
  for (int i = 0; i < 4096; ++i) {
    for (uint8_t& b : s) b = uint8_t(rng.integer(0, 256));
    check(s);
  }
  for (int bit = 0; bit < 96; ++bit) {
    std::memset(s, 0, sizeof s);
    s[bit / 8] = uint8_t(1u << (bit % 8));
    check(s);
  }
}

// The rounding rule itself: every element within half a step of its block's scale (plus the f16
// rounding of a legacy scale: at most 127 * 2^-11 of a step), the largest element at +-127, and a
// zero block all zeros with scale 0.
TEST(Int8Matmul, ActivationRoundingRule) {
  Rng rng(21);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (const DType t : {DType::kQ4_0, DType::kQ4_K}) {
    const int64_t block = dtype_is_kquant(t) ? kKQuantBlock : kQuantBlock, n = 3 * block;
    std::vector<float> x = rng.uniform_vec(static_cast<size_t>(n), -3.0f, 3.0f);
    for (int64_t i = block; i < 2 * block; ++i) x[static_cast<size_t>(i)] = 0.0f;  // block 1 is zero
    std::vector<int8_t> q(static_cast<size_t>(n));
    std::vector<float> d(3);
    int8_quantize_activations(x.data(), n, t, q.data(), d.data());
    for (int64_t b = 0; b < 3; ++b) {
      int qmax = 0;
      for (int64_t i = b * block; i < (b + 1) * block; ++i) {
        const float xi = x[static_cast<size_t>(i)], qi = float(q[static_cast<size_t>(i)]);
        EXPECT_LE(std::fabs(d[size_t(b)] * qi - xi), std::fabs(d[size_t(b)]) * (0.5 + 127.0 / 2048)) << dtype_name(t) << " " << i;
        qmax = std::max(qmax, std::abs(int(q[static_cast<size_t>(i)])));
      }
      if (b == 1) {
        EXPECT_EQ(qmax, 0);
        EXPECT_EQ(d[1], 0.0f);
      } else {
        EXPECT_EQ(qmax, 127) << dtype_name(t) << " block " << b;
      }
    }
  }
}

// The reference is the 8-bit product, not a copy of the f32 one: it differs from f32 activations
// by no more than the rounding of the activations allows (sum |w| x half a step), and not by 0.
TEST(Int8Matmul, ReferenceIsTheRoundedActivationsProduct) {
  Rng rng(22);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (const DType t : kInt8Types) {
    const int64_t K = 512, N = 5, M = 3;
    const Tensor w = testing::random_blocks(rng, N, K, t);
    const Tensor x = rng.uniform_tensor({M, K});
    Tensor got = nan_tensor({M, N}), f32 = nan_tensor({M, N});
    int8_matmul_reference(got, x, w, nullptr);
    matmul_forward_naive(f32, x, w, nullptr);
    std::vector<float> wd(static_cast<size_t>(K));
    double worst = 0.0;
    for (int64_t n = 0; n < N; ++n) {
      dequantize_row(wd.data(), static_cast<const char*>(w.raw()) + n * w.nbytes() / N, t, K);
      double l1 = 0.0;
      for (float v : wd) l1 += std::fabs(v);
      for (int64_t m = 0; m < M; ++m) {
        const double diff = std::fabs(double(got.to_vector()[size_t(m * N + n)]) - f32.to_vector()[size_t(m * N + n)]);
        EXPECT_LE(diff, l1 * (0.5 + 127.0 / 2048) / 127.0 + 1e-5) << dtype_name(t);
        worst = std::max(worst, diff);
      }
    }
    EXPECT_GT(worst, 0.0) << dtype_name(t);
  }
}

TEST(Int8Matmul, MatchesReferenceForEveryType) {
  if (!int8_matmul_usable(DType::kQ4_0)) GTEST_SKIP() << kNoKernel;
  Rng rng(23);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (const Int8Kernel kernel : int8_matmul_kernels())
  for (const DType t : kInt8Types) {
    SCOPED_TRACE(label(kernel, t));
    ASSERT_TRUE(int8_matmul_usable(t));
    // An odd number of legacy blocks leaves a half 64-wide chunk at the end.
    const std::vector<int64_t> ks = dtype_is_kquant(t) ? std::vector<int64_t>{256, 768} : std::vector<int64_t>{32, 96, 608};
    for (const int64_t K : ks)
      for (const int64_t M : {1, 3, 4, 9}) {
        const int64_t N = 13;
        const Tensor w = testing::random_blocks(rng, N, K, t);
        const Tensor x = rng.uniform_tensor({M, K});
        const Tensor bias = rng.uniform_tensor({N});
        Tensor got = nan_tensor({M, N}), want = nan_tensor({M, N});
        run_int8(got, x, w, &bias, kernel);
        int8_matmul_reference(want, x, w, &bias);
        EXPECT_LE(testing::max_abs_diff(got.to_vector(), want.to_vector()), tol(K)) << " K " << K << " M " << M;
      }
  }
}

// The largest products the types allow, all of one sign, so that every 16-bit pair sum of AVX2's
// VPMADDUBSW is at its extreme (Q8_0: -128 x -127 twice is 32512; Q6_K: codes 63): a saturated
// pair would be off by thousands of steps. Q8_0 blocks of q = -128 or 127 and d = 1/64, against
// activations of one magnitude whose signs follow the weights'; Q6_K and Q5_0 with every code bit set.
TEST(Int8Matmul, ExtremeCodesAreExact) {
  if (!int8_matmul_usable(DType::kQ8_0)) GTEST_SKIP() << kNoKernel;
  const int64_t K = 512, N = 3, M = 2;
  for (const DType t : {DType::kQ8_0, DType::kQ6_K, DType::kQ5_0})
    for (const Int8Kernel kernel : int8_matmul_kernels()) {
      SCOPED_TRACE(label(kernel, t));
      Tensor w = Tensor::zeros({N, K}, t);
      auto* bytes = static_cast<uint8_t*>(w.raw());
      const int64_t nblocks = N * K / dtype_block_elems(t), bb = dtype_block_bytes(t);
      std::vector<float> x(static_cast<size_t>(M * K));
      for (int64_t b = 0; b < nblocks; ++b) {
        uint8_t* blk = bytes + b * bb;
        const bool negative = b % 2 == 0;
        if (t == DType::kQ8_0) {
          auto* q = reinterpret_cast<BlockQ8_0*>(blk);
          q->d = f32_to_f16(1.0f / 64);
          std::memset(q->qs, negative ? 0x80 : 0x7f, sizeof(q->qs));
        } else if (t == DType::kQ6_K) {
          auto* q = reinterpret_cast<BlockQ6_K*>(blk);
          std::memset(q->ql, 0xff, sizeof(q->ql));
          std::memset(q->qh, 0xff, sizeof(q->qh));
          std::memset(q->scales, 1, sizeof(q->scales));
          q->d = f32_to_f16(1.0f / 64);
        } else {
          auto* q = reinterpret_cast<BlockQ5_0*>(blk);
          std::memset(q->qs, 0xff, sizeof(q->qs));
          std::memset(q->qh, 0xff, sizeof(q->qh));
          q->d = f32_to_f16(1.0f / 16);
        }
      }
      // Weight row n's block b is negative for even b (Q8_0 only); activations follow the sign.
      for (int64_t m = 0; m < M; ++m)
        for (int64_t k = 0; k < K; ++k) {
          const bool negative = t == DType::kQ8_0 && (k / kQuantBlock) % 2 == 0;
          x[size_t(m * K + k)] = (negative ? -1.0f : 1.0f) * (m + 1);
        }
      const Tensor xt = Tensor::from_f32({M, K}, x);
      Tensor got = nan_tensor({M, N}), want = nan_tensor({M, N});
      run_int8(got, xt, w, nullptr, kernel);
      int8_matmul_reference(want, xt, w, nullptr);
      EXPECT_LE(testing::max_abs_diff(got.to_vector(), want.to_vector()), tol(K));
      EXPECT_GT(std::fabs(want.to_vector()[0]), 1.0);
    }
}

// A row gives the same bits alone, in any batch, at any position, with 1 or 2 threads.
TEST(Int8Matmul, RowsAreBatchInvariant) {
  if (!int8_matmul_usable(DType::kQ4_0)) GTEST_SKIP() << kNoKernel;
  Rng rng(24);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int64_t K = 512, N = 37, M = 11;
  const int saved = omp_get_max_threads();
  for (const Int8Kernel kernel : int8_matmul_kernels())
  for (const DType t : kInt8Types) {
    SCOPED_TRACE(label(kernel, t));
    const Tensor w = testing::random_blocks(rng, N, K, t);
    const Tensor x = rng.uniform_tensor({M, K});
    Tensor all = nan_tensor({M, N});
    run_int8(all, x, w, nullptr, kernel);
    for (const int threads : {1, 2}) {
      omp_set_num_threads(threads);
      for (int64_t r = 0; r < M; ++r) {
        Tensor one = nan_tensor({1, N});
        run_int8(one, x.slice(0, r, r + 1), w, nullptr, kernel);
        EXPECT_TRUE(bitwise_equal(row(one, 0), row(all, r))) << " row " << r << " threads " << threads;
        const int64_t m0 = std::max<int64_t>(0, r - 2);
        Tensor some = nan_tensor({r + 1 - m0, N});
        run_int8(some, x.slice(0, m0, r + 1), w, nullptr, kernel);
        EXPECT_TRUE(bitwise_equal(row(some, r - m0), row(all, r))) << " row " << r << " of " << r + 1 - m0;
      }
    }
    omp_set_num_threads(saved);
  }
}

// A column slice of a weight at block boundaries (a row-parallel shard) and a strided output.
TEST(Int8Matmul, StridedWeightAndOutput) {
  if (!int8_matmul_usable(DType::kQ4_0)) GTEST_SKIP() << kNoKernel;
  Rng rng(25);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (const Int8Kernel kernel : int8_matmul_kernels())
  for (const DType t : {DType::kQ5_1, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    SCOPED_TRACE(label(kernel, t));
    const int64_t be = dtype_block_elems(t), K = 2 * be, N = 7, M = 5;
    const Tensor full = testing::random_blocks(rng, N, 3 * K, t);
    const Tensor w = full.slice(1, K, 2 * K);
    ASSERT_FALSE(w.is_contiguous());
    const Tensor x = rng.uniform_tensor({M, K});
    Tensor wide = nan_tensor({M, N + 3});
    Tensor got = wide.slice(1, 2, 2 + N), want = nan_tensor({M, N});
    run_int8(got, x, w, nullptr, kernel);
    int8_matmul_reference(want, x, w, nullptr);  // the reference reads rows by stride too
    EXPECT_LE(testing::max_abs_diff(got.contiguous().to_vector(), want.to_vector()), tol(K));
  }
}

// Inference (MatmulEngine in row-invariant mode) runs this kernel for the types it covers, by
// default; set_int8_activations(false) and the types it does not cover (Q2_K, Q3_K) keep f32
// activations.
TEST(Int8Matmul, EngineDispatch) {
  if (!int8_matmul_usable(DType::kQ4_0)) GTEST_SKIP() << kNoKernel;
  Rng rng(26);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  MatmulEngine eng;
  eng.set_row_invariant(true);
  for (const DType t : {DType::kQ4_1, DType::kQ6_K, DType::kQ3_K}) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor w = testing::random_blocks(rng, 9, 256, t);
    const Tensor x = rng.uniform_tensor({3, 256});
    Tensor got = nan_tensor({3, 9}), int8 = nan_tensor({3, 9}), f32 = nan_tensor({3, 9});
    matmul_forward(eng, got, x, w, nullptr);
    if (int8_matmul_usable(t)) run_int8(int8, x, w, nullptr);
    rowwise_matmul_forward(f32, x, w, nullptr);
    EXPECT_TRUE(bitwise_equal(got.to_vector(), (int8_matmul_usable(t) ? int8 : f32).to_vector()));
    eng.set_int8_activations(false);
    matmul_forward(eng, got, x, w, nullptr);
    EXPECT_TRUE(bitwise_equal(got.to_vector(), f32.to_vector()));
    eng.set_int8_activations(true);
  }
}

TEST(Int8Matmul, BadOperandsThrow) {
  const Tensor x = Tensor::zeros({2, 64}, DType::kF32);
  Tensor out = Tensor::zeros({2, 3}, DType::kF32);
  std::vector<char> buf(1 << 16);
  EXPECT_THROW(int8_matmul_reference(out, x, Tensor::zeros({3, 64}, DType::kF32), nullptr), Error);
  EXPECT_THROW(int8_matmul_reference(out, x, Tensor::zeros({3, 96}, DType::kQ4_0), nullptr), Error);
  EXPECT_THROW(int8_matmul_reference(out, Tensor::zeros({2, 256}, DType::kF32), Tensor::zeros({3, 256}, DType::kQ2_K), nullptr), Error);
  EXPECT_FALSE(int8_matmul_usable(DType::kQ2_K));
  EXPECT_FALSE(int8_matmul_usable(DType::kBF16));
  if (!int8_matmul_usable(DType::kQ4_0)) {
    EXPECT_THROW(run_int8(out, x, Tensor::zeros({3, 64}, DType::kQ4_0), nullptr), Error);
    return;
  }
  Tensor bad_out = Tensor::zeros({2, 4}, DType::kF32);
  EXPECT_THROW(run_int8(bad_out, x, Tensor::zeros({3, 64}, DType::kQ4_0), nullptr), Error);
}

}  // namespace
}  // namespace tensorpar

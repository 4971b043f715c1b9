// The bf16-activation inference matmuls, AMX tiles (amx_matmul.h) and AVX512-BF16 dots
// (avx512bf16_matmul.h): against their naive reference (activations rounded to bf16 the same way,
// products summed in double), over tails of M, N and K and strided operands; and the property they
// exist for: a row's output is bitwise the same alone or among other rows, at any position in the
// batch, with any thread count. Each kernel is skipped where the CPU does not offer it.
//
// Tolerance: bf16 x bf16 products are exact in f32; the f32 accumulation of K terms of |x w| <= 1
// differs from the double sum by at most about K * 2^-24 * sum |x w|: 1e-6 * K + 1e-6 absolute.
#include <omp.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/amx_matmul.h"
#include "kernels/cpu/avx512bf16_matmul.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::nan_tensor;
using testing::Rng;

std::vector<float> row(const Tensor& t, int64_t r) { return t.slice(0, r, r + 1).contiguous().to_vector(); }

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct Bf16Kernel {
  const char* name;
  bool (*usable)();
  int64_t (*scratch_bytes)(int64_t, int64_t);
  void (*run)(Tensor&, const Tensor&, const Tensor&, const Tensor*, void*);
  void operator()(Tensor& out, const Tensor& x, const Tensor& w, const Tensor* b) const {
    const std::shared_ptr<void> scratch = aligned_alloc_shared(scratch_bytes(x.dim(0), x.dim(1)));
    run(out, x, w, b, scratch.get());
  }
};

class Bf16Matmul : public ::testing::TestWithParam<Bf16Kernel> {
 protected:
  void SetUp() override {
    if (!GetParam().usable()) GTEST_SKIP() << GetParam().name << " is not available on this CPU / kernel";
  }
};

TEST_P(Bf16Matmul, MatchesNaiveOverTails) {
  const Bf16Kernel& kernel = GetParam();
  Rng rng(11);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (int64_t K : {1, 31, 32, 33, 64, 100, 256})
    for (int64_t N : {1, 15, 16, 17, 32, 33, 70})
      for (int64_t M : {1, 5, 16, 17, 33}) {
        SCOPED_TRACE("M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K));
        const Tensor x = rng.uniform_tensor({M, K});
        const Tensor w = rng.uniform_tensor({N, K}, DType::kBF16);
        const Tensor b = rng.uniform_tensor({N});
        Tensor got = nan_tensor({M, N}), want = nan_tensor({M, N});
        kernel(got, x, w, &b);
        bf16_rounded_matmul_naive(want, x, w, &b);
        ASSERT_LE(testing::max_abs_diff(got.to_vector(), want.to_vector()), 1e-6 * double(K) + 1e-6);
      }
}

TEST_P(Bf16Matmul, StridedOperandsAndNoBias) {
  const Bf16Kernel& kernel = GetParam();
  Rng rng(12);
  const int64_t M = 9, N = 21, K = 80;
  // Column slices of wider tensors: row strides differ from K and N.
  const Tensor xw = rng.uniform_tensor({M, K + 24});
  const Tensor ww = rng.uniform_tensor({N, K + 40}, DType::kBF16);
  const Tensor x = xw.slice(1, 8, 8 + K), w = ww.slice(1, 16, 16 + K);
  Tensor wide = nan_tensor({M, N + 5});
  Tensor got = wide.slice(1, 2, 2 + N);
  kernel(got, x, w, nullptr);
  Tensor want = nan_tensor({M, N});
  bf16_rounded_matmul_naive(want, x.contiguous(), w.contiguous(), nullptr);
  EXPECT_LE(testing::max_abs_diff(got.contiguous().to_vector(), want.to_vector()), 1e-6 * double(K) + 1e-6);
  // The columns around the output view are untouched.
  for (int64_t m = 0; m < M; ++m) {
    EXPECT_TRUE(std::isnan(wide.data<float>()[m * (N + 5) + 0]));
    EXPECT_TRUE(std::isnan(wide.data<float>()[m * (N + 5) + N + 4]));
  }
}

TEST_P(Bf16Matmul, RowsAreBatchInvariant) {
  const Bf16Kernel& kernel = GetParam();
  Rng rng(13);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int64_t K = 200, N = 53, M = 40;
  const Tensor x = rng.uniform_tensor({M, K});
  const Tensor w = rng.uniform_tensor({N, K}, DType::kBF16);
  Tensor all = nan_tensor({M, N});
  kernel(all, x, w, nullptr);
  for (int64_t r = 0; r < M; ++r) {
    // Alone, and as the last row of a batch of 2..20 rows that starts elsewhere.
    Tensor one = nan_tensor({1, N});
    kernel(one, x.slice(0, r, r + 1), w, nullptr);
    EXPECT_TRUE(bitwise_equal(row(one, 0), row(all, r))) << "row " << r << " alone";
    const int64_t m0 = std::max<int64_t>(0, r - 1 - (r * 7) % 19);
    Tensor some = nan_tensor({r + 1 - m0, N});
    kernel(some, x.slice(0, m0, r + 1), w, nullptr);
    EXPECT_TRUE(bitwise_equal(row(some, r - m0), row(all, r))) << "row " << r << " in rows [" << m0 << ", " << r + 1 << ")";
  }
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  Tensor single = nan_tensor({M, N});
  kernel(single, x, w, nullptr);
  omp_set_num_threads(saved);
  EXPECT_TRUE(bitwise_equal(single.to_vector(), all.to_vector()));
}

// K long enough for a kernel to walk it in slabs (the AVX512-BF16 kernel's accumulators wait in
// memory between slabs of 2048): one, two and three slabs with a partial last chunk, row counts
// across its 64-row chunks; against the naive product, and each row alone bitwise as in the batch.
TEST_P(Bf16Matmul, LongKMatchesNaiveAndRowsAreBatchInvariant) {
  const Bf16Kernel& kernel = GetParam();
  Rng rng(14);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (int64_t K : {3072, 3104, 5000, 7000})
    for (int64_t M : {1, 7, 70}) {
      const int64_t N = 9;
      SCOPED_TRACE("M=" + std::to_string(M) + " K=" + std::to_string(K));
      const Tensor x = rng.uniform_tensor({M, K});
      const Tensor w = rng.uniform_tensor({N, K}, DType::kBF16);
      const Tensor b = rng.uniform_tensor({N});
      Tensor got = nan_tensor({M, N}), want = nan_tensor({M, N});
      kernel(got, x, w, &b);
      bf16_rounded_matmul_naive(want, x, w, &b);
      ASSERT_LE(testing::max_abs_diff(got.to_vector(), want.to_vector()), 1e-6 * double(K) + 1e-6);
      for (int64_t r : {int64_t(0), M / 2, M - 1}) {
        Tensor one = nan_tensor({1, N});
        kernel(one, x.slice(0, r, r + 1), w, &b);
        EXPECT_TRUE(bitwise_equal(row(one, 0), row(got, r))) << "row " << r << " alone";
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Kernels, Bf16Matmul,
                         ::testing::Values(Bf16Kernel{"amx", &amx_bf16_usable, &amx_bf16_scratch_bytes,
                                                      &amx_bf16_matmul_forward},
                                           Bf16Kernel{"avx512bf16", &avx512_bf16_usable, &avx512bf16_scratch_bytes,
                                                      &avx512bf16_matmul_forward}),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tensorpar

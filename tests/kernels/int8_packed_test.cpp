// Row-packed weights (int8_packed.h): packing is exact and invertible for every packable type
// (the 32-weight types, Q4_K, Q5_K, Q6_K; whole and partial groups, strided sources), the packed
// kernel matches the naive reference on the GGUF tensor (int8_matmul_reference: f64 dots of the
// dequantized weights and the rounded activations) with each kernel this CPU runs (AVX-512 VNNI,
// AVX2), rows are batch- and thread-count-invariant, the extreme codes are exact, and the layout
// is refused wherever it cannot be read. The kernel tests skip on a CPU without AVX2 (packing is
// still checked there).
//
// Tolerances as in int8_matmul_test.cpp: 1e-6 * K + 1e-5 absolute (exact integer sums, f32
// scaling and accumulation of K terms).
#include <omp.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/quant.h"
#include "kernels/cpu/int8_matmul.h"
#include "kernels/cpu/int8_packed.h"
#include "kernels/cpu/matmul.h"
#include "quant_test_util.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::nan_tensor;
using testing::bytes_of;
using testing::Rng;

constexpr DType kPackable[] = {DType::kQ4_0, DType::kQ4_1,   DType::kQ5_0, DType::kQ5_1, DType::kQ8_0,
                               DType::kIQ4_NL, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};
constexpr const char* kNoKernel = "this CPU has no int8 kernel (AVX2) for row-packed weights";

double tol(int64_t K) { return 1e-6 * double(K) + 1e-5; }

void run_int8(Tensor& out, const Tensor& in, const Tensor& w, const Tensor* bias,
              Int8Kernel kernel = int8_matmul_kernels().front()) {
  const int64_t bytes = int8_matmul_scratch_bytes(in.dim(0), in.dim(1), w.dtype());
  std::vector<char> buf(static_cast<size_t>(bytes + 64));
  void* p = buf.data() + (64 - reinterpret_cast<uintptr_t>(buf.data()) % 64) % 64;
  int8_matmul_forward(out, in, w, bias, p, kernel);
}

// Every kernel this CPU runs on w row-packed against the naive reference on w (GGUF layout), within
// tol(K); returns the reference.
std::vector<float> expect_packed_matches_reference(const Tensor& x, const Tensor& w, const Tensor* bias) {
  Tensor want = nan_tensor({x.dim(0), w.dim(0)});
  int8_matmul_reference(want, x, w, bias);
  const Tensor packed = int8_pack_rows(w);
  for (const Int8Kernel kernel : int8_matmul_kernels()) {
    Tensor got = nan_tensor({x.dim(0), w.dim(0)});
    run_int8(got, x, packed, bias, kernel);
    EXPECT_LE(testing::max_abs_diff(got.to_vector(), want.to_vector()), tol(x.dim(1))) << int8_kernel_name(kernel);
  }
  return want.to_vector();
}

TEST(Int8Packed, PackingIsExactAndInvertible) {
  Rng rng(60);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (const DType t : kPackable)
    for (const int64_t N : {1, 8, 13, 37}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " N " + std::to_string(N));
      const Tensor w = testing::random_blocks(rng, N, 3 * dtype_block_elems(t), t);
      const Tensor p = int8_pack_rows(w);
      EXPECT_EQ(p.dtype(), dtype_row_packed(t));
      EXPECT_EQ(p.shape(), w.shape());
      EXPECT_EQ(p.nbytes(), w.nbytes());
      const Tensor back = int8_unpack_rows(p);
      EXPECT_EQ(back.dtype(), t);
      EXPECT_EQ(bytes_of(back), bytes_of(w));
      // The packed bytes are not the GGUF bytes (else nothing was interleaved).
      if (N >= 8) {
        EXPECT_NE(std::memcmp(p.raw(), w.raw(), size_t(w.nbytes())), 0);
      }
    }
  // A column slice at block boundaries (strided rows) packs as its contiguous copy does.
  const Tensor full = testing::random_blocks(rng, 11, 160, DType::kQ5_1);
  const Tensor cols = full.slice(1, 64, 128);
  Tensor copy = Tensor::empty({11, 64}, DType::kQ5_1);
  for (int64_t r = 0; r < 11; ++r)
    std::memcpy(static_cast<char*>(copy.raw()) + r * 2 * 24, static_cast<const char*>(full.raw()) + (r * 5 + 2) * 24, 48);
  EXPECT_EQ(bytes_of(int8_unpack_rows(int8_pack_rows(cols))), bytes_of(copy));
}

TEST(Int8Packed, MatchesReferenceForEveryType) {
  if (!int8_matmul_usable(DType::kQ4_0x8)) GTEST_SKIP() << kNoKernel;
  Rng rng(61);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  for (const DType t : kPackable)
    for (const int64_t blocks : {1, 3, 19})
      for (const int64_t M : {1, 3, 4, 9}) {
        const int64_t K = blocks * dtype_block_elems(t);
        const int64_t N = 13;
        const Tensor w = testing::random_blocks(rng, N, K, t);
        const Tensor x = rng.uniform_tensor({M, K});
        const Tensor bias = rng.uniform_tensor({N});
        SCOPED_TRACE(std::string(dtype_name(t)) + " K " + std::to_string(K) + " M " + std::to_string(M));
        expect_packed_matches_reference(x, w, &bias);
      }
}

// Every code of one sign at its extreme (Q8_0 q = -128 / 127, Q5_0 and IQ4_NL with every bit
// set): an offset or a fifth bit out of place would be off by many steps.
TEST(Int8Packed, ExtremeCodesAreExact) {
  if (!int8_matmul_usable(DType::kQ4_0x8)) GTEST_SKIP() << kNoKernel;
  const int64_t K = 256, N = 9, M = 2;
  for (const DType t : {DType::kQ8_0, DType::kQ5_0, DType::kQ5_1, DType::kIQ4_NL}) {
    SCOPED_TRACE(dtype_name(t));
    Tensor w = Tensor::zeros({N, K}, t);
    auto* bytes = static_cast<uint8_t*>(w.raw());
    const int64_t bb = dtype_block_bytes(t);
    for (int64_t b = 0; b < N * K / 32; ++b) {
      uint8_t* blk = bytes + b * bb;
      std::memset(blk + 2, b % 2 ? 0x7f : 0x80, size_t(bb - 2));
      if (t != DType::kQ8_0) std::memset(blk + 2, 0xff, size_t(bb - 2));
      const f16 d = f32_to_f16(1.0f / 64), m = f32_to_f16(0.5f);
      std::memcpy(blk, &d, 2);
      if (t == DType::kQ5_1) std::memcpy(blk + offsetof(BlockQ5_1, m), &m, 2);
    }
    std::vector<float> x(static_cast<size_t>(M * K));
    // Activations follow the weights' sign (Q8_0: negative blocks at even b), so nothing cancels.
    for (int64_t i = 0; i < M * K; ++i)
      x[size_t(i)] = (t == DType::kQ8_0 && (i % K) / 32 % 2 == 0 ? -1.0f : 1.0f) * float(i / K + 1);
    const Tensor xt = Tensor::from_f32({M, K}, x);
    EXPECT_GT(std::fabs(expect_packed_matches_reference(xt, w, nullptr)[0]), 1.0);
  }
}

// The K-quants with every bit of every code, scale and min set (Q4_K/Q5_K scales and mins 63,
// Q5_K's fifth bits, Q6_K codes 63 and scales -1), and with every code bit clear: a bit out of
// place in the packed scales, masks or high bits would move the sums by many steps.
TEST(Int8Packed, KQuantExtremeCodesAreExact) {
  if (!int8_matmul_usable(DType::kQ4_Kx8)) GTEST_SKIP() << kNoKernel;
  const int64_t K = 512, N = 10, M = 2;
  for (const DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K})
    for (const int fill : {0xff, 0x00}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " fill " + std::to_string(fill));
      Tensor w = Tensor::zeros({N, K}, t);
      auto* bytes = static_cast<uint8_t*>(w.raw());
      const int64_t bb = dtype_block_bytes(t);
      const f16 d = f32_to_f16(1.0f / 4096), dmin = f32_to_f16(1.0f / 1024);  // outputs of a few hundred
      for (int64_t b = 0; b < N * K / 256; ++b) {
        uint8_t* blk = bytes + b * bb;
        std::memset(blk, fill, size_t(bb));
        if (t == DType::kQ6_K) {
          std::memset(blk + offsetof(BlockQ6_K, scales), 0xff, 16);
          std::memcpy(blk + offsetof(BlockQ6_K, d), &d, 2);
        } else {
          std::memset(blk + offsetof(BlockQ4_K, scales), 0xff, 12);
          std::memcpy(blk + offsetof(BlockQ4_K, d), &d, 2);
          std::memcpy(blk + offsetof(BlockQ4_K, dmin), &dmin, 2);
        }
      }
      std::vector<float> x(static_cast<size_t>(M * K));
      for (int64_t i = 0; i < M * K; ++i) x[size_t(i)] = float(i / K + 1) * (fill ? 1.0f : -1.0f);
      const Tensor xt = Tensor::from_f32({M, K}, x);
      EXPECT_GT(std::fabs(expect_packed_matches_reference(xt, w, nullptr)[0]), 1.0);
    }
}

// A row gives the same bits alone, in any batch, at any position, with 1 or 2 threads.
TEST(Int8Packed, RowsAreBatchInvariant) {
  if (!int8_matmul_usable(DType::kQ4_0x8)) GTEST_SKIP() << kNoKernel;
  Rng rng(62);
  SCOPED_TRACE("seed " + std::to_string(testing::test_seed()));
  const int64_t K = 512, N = 37, M = 11;
  const int saved = omp_get_max_threads();
  for (const DType t : kPackable)
    for (const Int8Kernel kernel : int8_matmul_kernels()) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " " + int8_kernel_name(kernel));
      const Tensor w = int8_pack_rows(testing::random_blocks(rng, N, K, t));
      const Tensor x = rng.uniform_tensor({M, K});
      Tensor all = nan_tensor({M, N});
      run_int8(all, x, w, nullptr, kernel);
      const std::vector<float> av = all.to_vector();
      for (const int threads : {1, 2}) {
        omp_set_num_threads(threads);
        for (int64_t r = 0; r < M; ++r) {
          const int64_t m0 = std::max<int64_t>(0, r - 2);
          for (const int64_t first : {r, m0}) {
            Tensor some = nan_tensor({r + 1 - first, N});
            run_int8(some, x.slice(0, first, r + 1), w, nullptr, kernel);
            const std::vector<float> sv = some.to_vector();
            EXPECT_EQ(std::memcmp(sv.data() + (r - first) * N, av.data() + r * N, N * sizeof(float)), 0)
                << " row " << r << " of " << r + 1 - first << ", threads " << threads;
          }
        }
      }
      omp_set_num_threads(saved);
    }
}

TEST(Int8Packed, RefusedWhereTheLayoutCannotBeRead) {
  Rng rng(63);
  EXPECT_THROW(int8_pack_rows(testing::random_blocks(rng, 8, 256, DType::kQ3_K)), Error);
  EXPECT_THROW(int8_pack_rows(Tensor::zeros({8, 64}, DType::kF32)), Error);
  EXPECT_THROW(int8_unpack_rows(testing::random_blocks(rng, 8, 64, DType::kQ4_0)), Error);
  const Tensor p = int8_pack_rows(testing::random_blocks(rng, 13, 64, DType::kQ4_0));
  EXPECT_THROW(p.slice(0, 3, 13), Error);  // inside a group
  EXPECT_THROW(p.slice(1, 0, 32), Error);  // columns
  EXPECT_NO_THROW(p.slice(0, 8, 13));
  EXPECT_THROW(p.to_vector(), Error);
  EXPECT_THROW(p.transpose(0, 1), Error);
  EXPECT_THROW(Tensor::empty({13, 64}, DType::kQ4_0x8), Error);  // not whole groups
  if (!int8_matmul_usable(DType::kQ4_0x8)) return;
  const Tensor x = rng.uniform_tensor({2, 64});
  Tensor out = nan_tensor({2, 13});
  // Outside inference's int8 path (training, f32 activations) the layout cannot be multiplied.
  MatmulEngine eng;
  EXPECT_THROW(matmul_forward(eng, out, x, p, nullptr), Error);
  eng.set_row_invariant(true);
  eng.set_int8_activations(false);
  EXPECT_THROW(matmul_forward(eng, out, x, p, nullptr), Error);
  eng.set_int8_activations(true);
  EXPECT_NO_THROW(matmul_forward(eng, out, x, p, nullptr));
  Tensor dx = nan_tensor({2, 64});
  EXPECT_THROW(matmul_backward(eng, &dx, nullptr, nullptr, out, x, p), Error);
}

}  // namespace
}  // namespace tensorpar

// matmul (oneDNN) against the naive reference, backward against finite differences in double,
// transposed/batched operands, primitive caching, errors, and two rank threads at once.
//
// Tolerances: inputs are uniform in [-1, 1], so each product is at most 1 and a K-term f32 sum
// is off by at most ~K * 2^-24 per term ordering; we allow 4e-7 * K + 1e-6. bf16 inputs are
// exact in f32 products (both sides see the same bf16 values), so the same bound holds; a bf16
// output adds one rounding (relative 2^-8).
#include <omp.h>

#include <cmath>
#include <thread>
#include <vector>

#include "core/threading.h"
#include "kernels/cpu/matmul.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::nan_tensor;
using testing::Rng;

double f32_tol(int64_t K) { return 4e-7 * double(K) + 1e-6; }

// max |got - want| / (tol + 2^-8 |want|) for bf16 outputs, / tol otherwise; <= 1 passes.
double scaled_err(const Tensor& got, const Tensor& want, double tol) {
  const auto g = got.to_vector(), w = want.to_vector();
  EXPECT_EQ(g.size(), w.size());
  const double rel = got.dtype() == DType::kBF16 ? 1.0 / 256 : 0.0;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = std::fabs(double(g[i]) - double(w[i]));
    if (std::isnan(d)) return INFINITY;
    worst = std::max(worst, d / (tol + rel * std::fabs(double(w[i]))));
  }
  return worst;
}

struct Mnk {
  int64_t m, n, k;
};
const Mnk kShapes[] = {{1, 1, 1}, {1, 7, 33}, {7, 33, 577}, {33, 577, 7}, {577, 1, 33}, {1, 577, 33}, {33, 7, 1}};

TEST(Matmul, ForwardMatchesNaive) {
  TP_SEED_TRACE();
  Rng rng(1);
  MatmulEngine eng;
  for (const DType wt : {DType::kF32, DType::kBF16}) {
    for (const DType ot : {DType::kF32, DType::kBF16}) {
      for (const Mnk s : kShapes) {
        for (const bool with_bias : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(wt) << "->" << dtype_name(ot) << " M=" << s.m
                                            << " N=" << s.n << " K=" << s.k << " bias=" << with_bias);
          const Tensor in = rng.uniform_tensor({s.m, s.k}, wt);
          const Tensor w = rng.uniform_tensor({s.n, s.k}, wt);
          const Tensor bias = rng.uniform_tensor({s.n});
          Tensor out = nan_tensor({s.m, s.n}, ot);
          Tensor want = nan_tensor({s.m, s.n});
          matmul_forward(eng, out, in, w, with_bias ? &bias : nullptr);
          matmul_forward_naive(want, in, w, with_bias ? &bias : nullptr);
          EXPECT_LE(scaled_err(out, want, f32_tol(s.k)), 1.0);
        }
      }
    }
  }
}

TEST(Matmul, ForwardMixedDtypesAndLeadingDims) {
  TP_SEED_TRACE();
  Rng rng(2);
  MatmulEngine eng;
  // f32 activations against a bf16 weight are rounded to bf16 first (documented behaviour).
  const Tensor in = rng.uniform_tensor({3, 5, 33});
  const Tensor w = rng.uniform_tensor({7, 33}, DType::kBF16);
  Tensor out = nan_tensor({3, 5, 7});
  Tensor want = nan_tensor({3, 5, 7});
  matmul_forward(eng, out, in, w, nullptr);
  matmul_forward_naive(want, in.to(DType::kBF16), w, nullptr);
  EXPECT_LE(scaled_err(out, want, f32_tol(33)), 1.0);
  // bf16 activations against an f32 weight widen exactly.
  const Tensor in16 = rng.uniform_tensor({4, 33}, DType::kBF16);
  const Tensor w32 = rng.uniform_tensor({9, 33});
  Tensor out2 = nan_tensor({4, 9});
  Tensor want2 = nan_tensor({4, 9});
  matmul_forward(eng, out2, in16, w32, nullptr);
  matmul_forward_naive(want2, in16, w32, nullptr);
  EXPECT_LE(scaled_err(out2, want2, f32_tol(33)), 1.0);
}

TEST(Matmul, TransposedOperandsScalesAndStridedRows) {
  TP_SEED_TRACE();
  Rng rng(3);
  MatmulEngine eng;
  for (const DType t : {DType::kF32, DType::kBF16}) {
    const int64_t M = 33, N = 7, K = 577;
    const Tensor at = rng.uniform_tensor({K, M}, t);  // a = at^T
    const Tensor bt = rng.uniform_tensor({N, K}, t);  // b = bt^T
    const Tensor c0 = rng.uniform_tensor({M, N});
    Tensor c = c0.clone(), want = c0.clone();
    const Tensor a = at.transpose(0, 1), b = bt.transpose(0, 1);
    matmul(eng, c, a, b, nullptr, 0.5f, 1.0f);
    matmul_naive(want, a, b, nullptr, 0.5f, 1.0f);
    EXPECT_LE(scaled_err(c, want, f32_tol(K)), 1.0) << dtype_name(t);
    // Output is a column slice (row stride 2N) of a wider buffer.
    Tensor wide = nan_tensor({M, 2 * N});
    Tensor cs = wide.slice(1, 3, 3 + N);
    Tensor want2 = nan_tensor({M, N});
    matmul(eng, cs, a, b, nullptr);
    matmul_naive(want2, a, b, nullptr);
    EXPECT_LE(scaled_err(cs, want2, f32_tol(K)), 1.0) << dtype_name(t);
  }
}

TEST(Matmul, BatchedWithBroadcast) {
  TP_SEED_TRACE();
  Rng rng(4);
  MatmulEngine eng;
  {
    const Tensor a = rng.uniform_tensor({3, 7, 33});
    const Tensor b = rng.uniform_tensor({3, 33, 5});
    Tensor c = nan_tensor({3, 7, 5}), want = nan_tensor({3, 7, 5});
    matmul(eng, c, a, b, nullptr);
    matmul_naive(want, a, b, nullptr);
    EXPECT_LE(scaled_err(c, want, f32_tol(33)), 1.0);
  }
  {
    // Attention-like: (B,NH,T,HS) x (B,1,HS,T) with K^T as a transposed view, bf16 in.
    const Tensor q = rng.uniform_tensor({2, 4, 7, 16}, DType::kBF16);
    const Tensor k = rng.uniform_tensor({2, 1, 9, 16}, DType::kBF16);
    Tensor s = nan_tensor({2, 4, 7, 9}), want = nan_tensor({2, 4, 7, 9});
    matmul(eng, s, q, k.transpose(2, 3), nullptr, 0.25f);
    matmul_naive(want, q, k.transpose(2, 3), nullptr, 0.25f);
    EXPECT_LE(scaled_err(s, want, f32_tol(16)), 1.0);
  }
}

// Loss L = sum(G .* (x W^T + b)) evaluated in double: the finite-difference oracle.
double loss(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
            const std::vector<double>& g, int64_t M, int64_t N, int64_t K) {
  double l = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = b[size_t(n)];
      for (int64_t k = 0; k < K; ++k) acc += x[size_t(m * K + k)] * w[size_t(n * K + k)];
      l += g[size_t(m * N + n)] * acc;
    }
  return l;
}

std::vector<double> to_double(const Tensor& t) {
  const auto v = t.to_vector();
  return std::vector<double>(v.begin(), v.end());
}

TEST(Matmul, BackwardMatchesFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(5);
  MatmulEngine eng;
  for (const Mnk s : {Mnk{7, 33, 65}, Mnk{1, 7, 33}, Mnk{33, 1, 7}}) {
    SCOPED_TRACE(::testing::Message() << "M=" << s.m << " N=" << s.n << " K=" << s.k);
    const Tensor x = rng.uniform_tensor({s.m, s.k});
    const Tensor w = rng.uniform_tensor({s.n, s.k});
    const Tensor b = rng.uniform_tensor({s.n});
    const Tensor g = rng.uniform_tensor({s.m, s.n});
    // Gradients accumulate onto what is there already.
    const Tensor dx0 = rng.uniform_tensor({s.m, s.k}), dw0 = rng.uniform_tensor({s.n, s.k});
    const Tensor db0 = rng.uniform_tensor({s.n});
    Tensor dx = dx0.clone(), dw = dw0.clone(), db = db0.clone();
    matmul_backward(eng, &dx, &dw, &db, g, x, w);

    std::vector<double> xd = to_double(x), wd = to_double(w), bd = to_double(b);
    const std::vector<double> gd = to_double(g);
    const double h = 1e-3;
    auto fd = [&](std::vector<double>& v, size_t i) {
      const double keep = v[i];
      v[i] = keep + h;
      const double lp = loss(xd, wd, bd, gd, s.m, s.n, s.k);
      v[i] = keep - h;
      const double lm = loss(xd, wd, bd, gd, s.m, s.n, s.k);
      v[i] = keep;
      return (lp - lm) / (2 * h);
    };
    auto check = [&](const Tensor& got, const Tensor& start, std::vector<double>& v, int64_t terms) {
      const auto gv = got.to_vector(), sv = start.to_vector();
      for (size_t i = 0; i < v.size(); ++i)
        ASSERT_NEAR(double(gv[i]) - double(sv[i]), fd(v, i), f32_tol(terms) + 1e-6) << "index " << i;
    };
    check(dx, dx0, xd, s.n);
    check(dw, dw0, wd, s.m);
    check(db, db0, bd, s.m);
  }
}

TEST(Matmul, BackwardBf16MatchesNaive) {
  TP_SEED_TRACE();
  Rng rng(6);
  MatmulEngine eng;
  const int64_t M = 33, N = 7, K = 577;
  const Tensor x = rng.uniform_tensor({M, K}, DType::kBF16);
  const Tensor w = rng.uniform_tensor({N, K}, DType::kBF16);
  const Tensor g = rng.uniform_tensor({M, N}, DType::kBF16);
  const Tensor dx0 = rng.uniform_tensor({M, K}), dw0 = rng.uniform_tensor({N, K}), db0 = rng.uniform_tensor({N});
  Tensor dx = dx0.clone(), dw = dw0.clone(), db = db0.clone();
  Tensor ex = dx0.clone(), ew = dw0.clone(), eb = db0.clone();
  matmul_backward(eng, &dx, &dw, &db, g, x, w);
  matmul_backward_naive(&ex, &ew, &eb, g, x, w);
  EXPECT_LE(scaled_err(dx, ex, f32_tol(N)), 1.0);
  EXPECT_LE(scaled_err(dw, ew, f32_tol(M)), 1.0);
  EXPECT_LE(scaled_err(db, eb, f32_tol(M)), 1.0);
  // Only some gradients.
  Tensor dx2 = dx0.clone();
  matmul_backward(eng, &dx2, nullptr, nullptr, g, x, w);
  EXPECT_LE(scaled_err(dx2, ex, f32_tol(N)), 1.0);
}

// bf16 compute on f32 tensors: forward and every gradient equal the naive reference on the
// operands rounded to bf16 (f32 accumulation, f32 outputs); d_bias sums the f32 d_out. It must
// differ from f32 compute (the rounding really happens), and the mode is per engine.
TEST(Matmul, Bf16ComputeRoundsOperandsOfF32Tensors) {
  TP_SEED_TRACE();
  Rng rng(8);
  MatmulEngine eng, eng32;
  eng.set_compute_dtype(DType::kBF16);
  EXPECT_THROW(eng32.set_compute_dtype(DType::kF16), Error);
  const int64_t M = 33, N = 7, K = 577;
  const Tensor x = rng.uniform_tensor({M, K}), w = rng.uniform_tensor({N, K}), b = rng.uniform_tensor({N});
  const Tensor g = rng.uniform_tensor({M, N});
  const Tensor xb = x.to(DType::kBF16), wb = w.to(DType::kBF16), gb = g.to(DType::kBF16);
  Tensor out = nan_tensor({M, N}), want = nan_tensor({M, N}), out32 = nan_tensor({M, N});
  matmul_forward(eng, out, x, w, &b);
  matmul_forward_naive(want, xb, wb, &b);
  EXPECT_LE(scaled_err(out, want, f32_tol(K)), 1.0);
  matmul_forward(eng32, out32, x, w, &b);
  EXPECT_GT(testing::max_abs_diff(out32.to_vector(), out.to_vector()), 1e-4);

  const Tensor dx0 = rng.uniform_tensor({M, K}), dw0 = rng.uniform_tensor({N, K}), db0 = rng.uniform_tensor({N});
  Tensor dx = dx0.clone(), dw = dw0.clone(), db = db0.clone();
  Tensor ex = dx0.clone(), ew = dw0.clone(), eb = db0.clone();
  matmul_backward(eng, &dx, &dw, &db, g, x, w);
  matmul_backward_naive(&ex, &ew, nullptr, gb, xb, wb);
  matmul_backward_naive(nullptr, nullptr, &eb, g, x, w);
  EXPECT_LE(scaled_err(dx, ex, f32_tol(N)), 1.0);
  EXPECT_LE(scaled_err(dw, ew, f32_tol(M)), 1.0);
  EXPECT_LE(scaled_err(db, eb, f32_tol(M)), 1.0);
  EXPECT_EQ(dx.dtype(), DType::kF32);
  EXPECT_EQ(dw.dtype(), DType::kF32);
}

TEST(Matmul, RepeatedShapesReuseCachedPrimitives) {
  TP_SEED_TRACE();
  Rng rng(7);
  MatmulEngine eng;
  const Tensor in = rng.uniform_tensor({7, 33}), w = rng.uniform_tensor({5, 33});
  Tensor out = nan_tensor({7, 5});
  matmul_forward(eng, out, in, w, nullptr);
  const int64_t n = eng.cached_primitives();
  EXPECT_GE(n, 1);
  for (int i = 0; i < 5; ++i) {
    const Tensor in2 = rng.uniform_tensor({7, 33});  // new data, same shape
    matmul_forward(eng, out, in2, w, nullptr);
  }
  EXPECT_EQ(eng.cached_primitives(), n);
}

TEST(Matmul, BadShapesThrow) {
  MatmulEngine eng;
  const Tensor in = Tensor::zeros({4, 8}, DType::kF32), w = Tensor::zeros({3, 9}, DType::kF32);
  Tensor out = Tensor::zeros({4, 3}, DType::kF32);
  EXPECT_THROW(matmul_forward(eng, out, in, w, nullptr), Error);
  const Tensor w2 = Tensor::zeros({3, 8}, DType::kF32);
  Tensor out_bad = Tensor::zeros({4, 4}, DType::kF32);
  EXPECT_THROW(matmul_forward(eng, out_bad, in, w2, nullptr), Error);
  const Tensor bias_bad = Tensor::zeros({4}, DType::kF32);
  EXPECT_THROW(matmul_forward(eng, out, in, w2, &bias_bad), Error);
  Tensor c = Tensor::zeros({4, 3}, DType::kF32);
  EXPECT_THROW(matmul(eng, c, in, Tensor::zeros({8, 3}, DType::kBF16), nullptr), Error);
  try {
    matmul_forward(eng, out, in, w, nullptr);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[matmul_forward]"), std::string::npos) << e.what();
  }
}

// Two ranks as two std::threads with one OpenMP thread each, each with its own engine.
TEST(Matmul, TwoRankThreadsConcurrently) {
  TP_SEED_TRACE();
  std::vector<int> ok(2, 0);
  auto rank = [&](int r) {
    apply_rank_threads(RankThreads{1, {}});
    Rng rng(100 + uint64_t(r));
    MatmulEngine eng;
    int good = 1;
    for (int it = 0; it < 10; ++it) {
      const Tensor in = rng.uniform_tensor({33, 65}, DType::kBF16);
      const Tensor w = rng.uniform_tensor({17 + r, 65}, DType::kBF16);
      Tensor out = nan_tensor({33, 17 + r}), want = nan_tensor({33, 17 + r});
      matmul_forward(eng, out, in, w, nullptr);
      matmul_forward_naive(want, in, w, nullptr);
      good &= int(scaled_err(out, want, f32_tol(65)) <= 1.0);
      good &= int(omp_get_max_threads() == 1);
    }
    ok[size_t(r)] = good;
  };
  std::thread t0(rank, 0), t1(rank, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(ok[0], 1);
  EXPECT_EQ(ok[1], 1);
}

}  // namespace
}  // namespace tensorpar

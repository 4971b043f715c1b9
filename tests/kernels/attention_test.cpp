// Causal GQA attention over a KV cache: forward and lse against a double-precision formula
// (MHA, GQA, MQA, odd head sizes, cache offsets with spare capacity), prefill against token-by-
// token decode, and the backward (d_q, d_k, d_v) against finite differences.
#include "kernels/cpu/attention.h"

#include <algorithm>
#include <cmath>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::nan_vec;
using testing::Rng;

int64_t kv_rows(const AttentionDims& d) {
  return d.T_kv ? d.T_kv : d.pos0 + d.T;
}

// out (B,T,NH,HS) in double; lse (B,NH,T) if non-null.
std::vector<double> ref_attention(const std::vector<double>& q, const std::vector<double>& k,
                                  const std::vector<double>& v, const AttentionDims& d,
                                  std::vector<double>* lse = nullptr) {
  const int64_t Tk = kv_rows(d), group = d.NH / d.NKV;
  const double scale = d.scale != 0 ? d.scale : 1.0 / std::sqrt(static_cast<double>(d.HS));
  std::vector<double> out(static_cast<size_t>(d.B * d.T * d.NH * d.HS), 0.0);
  if (lse) lse->assign(static_cast<size_t>(d.B * d.NH * d.T), 0.0);
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t t = 0; t < d.T; ++t)
      for (int64_t h = 0; h < d.NH; ++h) {
        const int64_t g = h / group;
        const double* qr = q.data() + ((b * d.T + t) * d.NH + h) * d.HS;
        std::vector<double> s;
        // A sliding window keeps the keys at distance < window from the query's position.
        const int64_t j0 = d.window > 0 ? std::max<int64_t>(0, d.pos0 + t - d.window + 1) : 0;
        for (int64_t j = j0; j <= d.pos0 + t; ++j) {
          const double* kr = k.data() + ((b * Tk + j) * d.NKV + g) * d.HS;
          double dot = 0;
          for (int64_t i = 0; i < d.HS; ++i) dot += qr[i] * kr[i];
          s.push_back(dot * scale);
        }
        const double m = *std::max_element(s.begin(), s.end());
        double z = 0;
        for (double x : s) z += std::exp(x - m);
        double* o = out.data() + ((b * d.T + t) * d.NH + h) * d.HS;
        for (size_t j = 0; j < s.size(); ++j) {
          const double p = std::exp(s[j] - m) / z;
          const double* vr = v.data() + ((b * Tk + j0 + static_cast<int64_t>(j)) * d.NKV + g) * d.HS;
          for (int64_t i = 0; i < d.HS; ++i) o[i] += p * vr[i];
        }
        if (lse) (*lse)[static_cast<size_t>((b * d.NH + h) * d.T + t)] = m + std::log(z);
      }
  return out;
}

AttentionDims dims(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int64_t pos0 = 0,
                   int64_t T_kv = 0, int64_t window = 0) {
  AttentionDims d;
  d.window = window;
  d.B = B;
  d.T = T;
  d.NH = NH;
  d.NKV = NKV;
  d.HS = HS;
  d.pos0 = pos0;
  d.T_kv = T_kv;
  return d;
}

std::string describe(const AttentionDims& d) {
  return "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " NH=" + std::to_string(d.NH) +
         " NKV=" + std::to_string(d.NKV) + " HS=" + std::to_string(d.HS) +
         " pos0=" + std::to_string(d.pos0) + " T_kv=" + std::to_string(d.T_kv) +
         " window=" + std::to_string(d.window);
}

struct Inputs {
  std::vector<float> q, k, v;
};

Inputs random_inputs(Rng& rng, const AttentionDims& d) {
  const size_t nq = static_cast<size_t>(d.B * d.T * d.NH * d.HS);
  const size_t nkv = static_cast<size_t>(d.B * kv_rows(d) * d.NKV * d.HS);
  // Spread 2: scores vary enough that the softmax is far from uniform.
  return {rng.uniform_vec(nq, -2, 2), rng.uniform_vec(nkv, -2, 2), rng.uniform_vec(nkv, -1, 1)};
}

using BackwardFn = void (*)(float*, float*, float*, const float*, const float*, const float*,
                            const float*, const float*, const float*, const AttentionDims&);
const std::pair<const char*, BackwardFn> kBackwards[] = {{"tiled", attention_backward},
                                                         {"naive", attention_backward_naive}};

TEST(Attention, ForwardMatchesDoubleFormula) {
  TP_SEED_TRACE();
  Rng rng(1);
  std::vector<AttentionDims> cases = {
      dims(1, 1, 1, 1, 1),            // smallest
      dims(2, 7, 4, 2, 8),            // GQA, batched training
      dims(1, 33, 6, 1, 16),          // MQA
      dims(2, 7, 3, 3, 5),            // MHA, odd sizes
      dims(1, 7, 7, 7, 33),           // NH odd, HS odd
      dims(1, 1, 8, 2, 16, 40, 64),   // decode at position 40 of a 64-row cache
      dims(2, 7, 6, 2, 8, 26, 40),    // chunked prefill after 26 cached tokens
      dims(1, 1, 4, 2, 8, 600, 700),  // decode over a long cache: keys split, partials merged
      dims(2, 5, 6, 3, 8, 700, 720),  // short chunk over a long cache, batched, split
      // Sliding windows: inside one key tile, across tiles and query blocks, with a cache
      // offset, and split decode over a long cache.
      dims(2, 7, 4, 2, 8, 0, 0, 3),
      dims(1, 150, 2, 1, 8, 0, 0, 70),
      dims(2, 7, 6, 2, 8, 26, 40, 10),
      dims(1, 1, 4, 2, 8, 600, 700, 300),
      dims(2, 5, 6, 3, 8, 700, 720, 17),
      dims(1, 40, 2, 1, 4, 0, 0, 1),  // window 1: each query sees itself only
  };
  if (!testing::kSanitized) cases.push_back(dims(1, 577, 2, 1, 16));
  using Fn =
      void (*)(float*, float*, const float*, const float*, const float*, const AttentionDims&);
  const std::pair<const char*, Fn> fns[] = {{"tiled", attention_forward},
                                            {"naive", attention_forward_naive}};
  for (const auto& d : cases) {
    const auto in = random_inputs(rng, d);
    std::vector<double> want_lse;
    const auto want = ref_attention(testing::to_double(in.q), testing::to_double(in.k),
                                    testing::to_double(in.v), d, &want_lse);
    for (const auto& [name, fn] : fns) {
      auto out = nan_vec(in.q.size()), lse = nan_vec(want_lse.size());
      fn(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), d);
      expect_close(out, want, 1e-5, 1e-4, std::string(name) + " out " + describe(d));
      expect_close(lse, want_lse, 1e-5, 1e-5, std::string(name) + " lse " + describe(d));
      // Inference: no lse.
      auto out2 = nan_vec(in.q.size());
      fn(out2.data(), nullptr, in.q.data(), in.k.data(), in.v.data(), d);
      expect_close(out2, out, 0, 0, std::string(name) + " out without lse " + describe(d));
    }
  }
}

TEST(Attention, TiledMatchesNaiveOnLargerSizes) {
  TP_SEED_TRACE();
  Rng rng(5);
  const std::vector<AttentionDims> cases =
      testing::kSanitized
          ? std::vector<AttentionDims>{dims(1, 40, 4, 2, 16), dims(1, 1, 4, 1, 64, 150, 160)}
          : std::vector<AttentionDims>{dims(2, 200, 6, 2, 64),             // several tiles each way
                                       dims(1, 1, 8, 2, 128, 1000, 1024),  // decode, long cache
                                       dims(1, 37, 9, 3, 64, 300, 400)};   // chunked prefill
  for (const auto& d : cases) {
    const auto in = random_inputs(rng, d);
    auto a = nan_vec(in.q.size()), b = nan_vec(in.q.size());
    auto la = nan_vec(static_cast<size_t>(d.B * d.NH * d.T)), lb = la;
    attention_forward(a.data(), la.data(), in.q.data(), in.k.data(), in.v.data(), d);
    attention_forward_naive(b.data(), lb.data(), in.q.data(), in.k.data(), in.v.data(), d);
    expect_close(a, b, 2e-6, 1e-4, "out " + describe(d));
    expect_close(la, lb, 1e-5, 1e-6, "lse " + describe(d));
  }
}

TEST(Attention, PrefillEqualsTokenByTokenDecode) {
  TP_SEED_TRACE();
  Rng rng(2);
  const int64_t T = 9, NH = 4, NKV = 2, HS = 8, cap = 16;
  const auto d_full = dims(1, T, NH, NKV, HS, 0, cap);
  const auto in = random_inputs(rng, d_full);
  auto full = nan_vec(in.q.size());
  attention_forward(full.data(), nullptr, in.q.data(), in.k.data(), in.v.data(), d_full);
  std::vector<float> steps;
  // Prefill 4 tokens, then decode one at a time: positions continue from pos0.
  int64_t pos = 0;
  for (int64_t n : {4, 1, 1, 1, 1, 1}) {
    const auto d = dims(1, n, NH, NKV, HS, pos, cap);
    auto out = nan_vec(static_cast<size_t>(n * NH * HS));
    attention_forward(out.data(), nullptr, in.q.data() + pos * NH * HS, in.k.data(), in.v.data(),
                      d);
    steps.insert(steps.end(), out.begin(), out.end());
    pos += n;
  }
  ASSERT_EQ(pos, T);
  expect_close(steps, full, 1e-6, 1e-5, "prefill + decode vs one pass");
}

TEST(Attention, BackwardMatchesFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(3);
  const std::vector<AttentionDims> cases = {
      dims(1, 1, 1, 1, 1),         dims(2, 5, 4, 2, 3),  // GQA, batched
      dims(1, 7, 3, 1, 4),                               // MQA, 3 query heads on one kv head
      dims(1, 4, 2, 2, 5),                               // MHA
      dims(1, 3, 4, 2, 4, 5, 10),   // cache offset with spare rows: rows >= 8 must stay untouched
      dims(1, 70, 1, 1, 2, 3, 80),  // more than one key tile (64) and query block (16)
      dims(2, 6, 4, 2, 3, 0, 0, 2),     // sliding window
      dims(1, 80, 1, 1, 2, 0, 0, 20),   // sliding window across key tiles and query blocks
      dims(1, 5, 2, 1, 3, 4, 12, 3),    // sliding window after cached tokens
  };
  for (const auto& d : cases) {
    const auto in = random_inputs(rng, d);
    const auto qd = testing::to_double(in.q), kd = testing::to_double(in.k),
               vd = testing::to_double(in.v);
    const auto dy = rng.uniform_vec(in.q.size());
    const auto dyd = testing::to_double(dy);
    const auto want_dq = testing::numeric_grad(
        [&](const std::vector<double>& x) {
          return testing::weighted_sum(ref_attention(x, kd, vd, d), dyd);
        },
        qd);
    const auto want_dk = testing::numeric_grad(
        [&](const std::vector<double>& x) {
          return testing::weighted_sum(ref_attention(qd, x, vd, d), dyd);
        },
        kd);
    const auto want_dv = testing::numeric_grad(
        [&](const std::vector<double>& x) {
          return testing::weighted_sum(ref_attention(qd, kd, x, d), dyd);
        },
        vd);
    std::vector<float> out(in.q.size()), lse(static_cast<size_t>(d.B * d.NH * d.T));
    attention_forward(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), d);
    const auto dq0 = rng.uniform_vec(in.q.size()), dk0 = rng.uniform_vec(in.k.size()),
               dv0 = rng.uniform_vec(in.v.size());
    for (const auto& [name, fn] : kBackwards) {
      const std::string what = std::string(name) + " " + describe(d);
      auto dq = dq0, dk = dk0, dv = dv0;
      fn(dq.data(), dk.data(), dv.data(), dy.data(), in.q.data(), in.k.data(), in.v.data(),
         out.data(), lse.data(), d);
      // Rows past pos0 + T have zero finite-difference gradient, so plus() also checks that
      // they are left exactly as they were (up to atol).
      expect_close(dq, testing::plus(dq0, want_dq), 1e-5, 1e-4, "d_q " + what);
      expect_close(dk, testing::plus(dk0, want_dk), 1e-5, 1e-4, "d_k " + what);
      expect_close(dv, testing::plus(dv0, want_dv), 1e-5, 1e-4, "d_v " + what);
      if (d.T_kv > d.pos0 + d.T) {
        const size_t first_unused = static_cast<size_t>((d.pos0 + d.T) * d.NKV * d.HS);
        for (size_t i = first_unused; i < dk.size(); ++i) {
          ASSERT_EQ(dk[i], dk0[i]) << "unused cache row touched, element " << i << " " << what;
          ASSERT_EQ(dv[i], dv0[i]) << "unused cache row touched, element " << i << " " << what;
        }
      }
    }
  }
}

TEST(Attention, BackwardOnLargerSizesMatchesDoubleGradient) {
  // A size past the parallel threshold, checked against analytic gradients in double computed
  // from the reference probabilities (finite differences would be too slow here).
  TP_SEED_TRACE();
  Rng rng(4);
  for (const int64_t window : {int64_t(0), int64_t(37)}) {
  auto d = testing::kSanitized ? dims(1, 24, 4, 2, 8) : dims(2, 150, 6, 2, 16, 30, 200);
  d.window = window;
  const auto in = random_inputs(rng, d);
  const auto dy = rng.uniform_vec(in.q.size());
  // Double-precision gradient: directional check along a random direction for each input,
  // by central differences of the double reference (one pair of evaluations per input).
  const auto qd = testing::to_double(in.q), kd = testing::to_double(in.k),
             vd = testing::to_double(in.v);
  const auto dyd = testing::to_double(dy);
  std::vector<float> out(in.q.size()), lse(static_cast<size_t>(d.B * d.NH * d.T));
  attention_forward(out.data(), lse.data(), in.q.data(), in.k.data(), in.v.data(), d);
  std::vector<float> dq(in.q.size(), 0.0f), dk(in.k.size(), 0.0f), dv(in.v.size(), 0.0f);
  attention_backward(dq.data(), dk.data(), dv.data(), dy.data(), in.q.data(), in.k.data(),
                     in.v.data(), out.data(), lse.data(), d);
  auto directional = [&](int which, const std::vector<float>& grad) {
    const std::vector<double>& base = which == 0 ? qd : which == 1 ? kd : vd;
    const auto dir = testing::to_double(rng.uniform_vec(base.size()));
    auto eval = [&](double eps) {
      std::vector<double> x = base;
      for (size_t i = 0; i < x.size(); ++i) x[i] += eps * dir[i];
      const auto o = which == 0   ? ref_attention(x, kd, vd, d)
                     : which == 1 ? ref_attention(qd, x, vd, d)
                                  : ref_attention(qd, kd, x, d);
      return testing::weighted_sum(o, dyd);
    };
    const double h = 1e-5;
    const double want = (eval(h) - eval(-h)) / (2 * h);
    double got = 0, norm = 0;
    for (size_t i = 0; i < dir.size(); ++i) {
      got += grad[i] * dir[i];
      norm += std::fabs(grad[i] * dir[i]);
    }
    EXPECT_NEAR(got, want, 1e-5 * norm + 1e-6) << "input " << which << " " << describe(d);
  };
  directional(0, dq);
  directional(1, dk);
  directional(2, dv);
  // The naive backward agrees with the tiled one.
  std::vector<float> nq(in.q.size(), 0.0f), nk(in.k.size(), 0.0f), nv(in.v.size(), 0.0f);
  attention_backward_naive(nq.data(), nk.data(), nv.data(), dy.data(), in.q.data(), in.k.data(),
                           in.v.data(), out.data(), lse.data(), d);
  expect_close(dq, nq, 1e-5, 1e-4, "tiled vs naive d_q");
  expect_close(dk, nk, 1e-5, 1e-4, "tiled vs naive d_k");
  expect_close(dv, nv, 1e-5, 1e-4, "tiled vs naive d_v");
  }
}

TEST(Attention, CustomScaleAndEmptySizes) {
  TP_SEED_TRACE();
  Rng rng(6);
  auto d = dims(2, 7, 4, 2, 8, 3, 12);
  d.scale = 0.3f;
  const auto in = random_inputs(rng, d);
  const auto want = ref_attention(testing::to_double(in.q), testing::to_double(in.k),
                                  testing::to_double(in.v), d);
  auto out = nan_vec(in.q.size());
  attention_forward(out.data(), nullptr, in.q.data(), in.k.data(), in.v.data(), d);
  expect_close(out, want, 1e-5, 1e-4, "scale 0.3");
  // No query tokens, or no sequences: nothing to do, nothing touched.
  for (const auto& e : {dims(1, 0, 4, 2, 8, 5, 10), dims(0, 3, 4, 2, 8)}) {
    std::vector<float> dk(in.k.size(), 1.0f), dv(in.v.size(), 1.0f);
    attention_forward(nullptr, nullptr, in.q.data(), in.k.data(), in.v.data(), e);
    attention_backward(nullptr, dk.data(), dv.data(), nullptr, in.q.data(), in.k.data(),
                       in.v.data(), nullptr, in.q.data(), e);
    for (size_t i = 0; i < dk.size(); ++i)
      ASSERT_TRUE(dk[i] == 1.0f && dv[i] == 1.0f) << describe(e);
  }
}

TEST(Attention, ResultsDoNotDependOnThreadCount) {
  // Bitwise: every sum has a fixed order whatever the team size (TP=N must equal TP=1). With one
  // thread the backward takes its single pass, with three (fewer than 2 items per thread) its
  // two passes: the two must agree bitwise too, with and without a sliding window.
  TP_SEED_TRACE();
  Rng rng(7);
  for (const auto& d : {dims(2, 40, 6, 2, 16), dims(1, 2, 4, 2, 16, 700, 720), dims(2, 150, 4, 2, 8, 0, 0, 70)}) {
    const auto in = random_inputs(rng, d);
    const auto dy = rng.uniform_vec(in.q.size());
    std::vector<float> results[2][5];
    for (int run = 0; run < 2; ++run)
      testing::with_threads(run == 0 ? 1 : 3, [&] {
        auto& r = results[run];
        r[0].assign(in.q.size(), 0.0f);
        r[1].assign(static_cast<size_t>(d.B * d.NH * d.T), 0.0f);
        attention_forward(r[0].data(), r[1].data(), in.q.data(), in.k.data(), in.v.data(), d);
        r[2].assign(in.q.size(), 0.0f);
        r[3].assign(in.k.size(), 0.0f);
        r[4].assign(in.v.size(), 0.0f);
        attention_backward(r[2].data(), r[3].data(), r[4].data(), dy.data(), in.q.data(),
                           in.k.data(), in.v.data(), r[0].data(), r[1].data(), d);
      });
    for (int i = 0; i < 5; ++i)
      EXPECT_EQ(results[0][i], results[1][i]) << "output " << i << " " << describe(d);
  }
}

TEST(Attention, BadShapesAreErrors) {
  std::vector<float> buf(1024, 0.0f);
  auto call = [&](const AttentionDims& d) {
    attention_forward(buf.data(), nullptr, buf.data(), buf.data(), buf.data(), d);
  };
  testing::expect_error_with([&] { call(dims(1, 2, 6, 4, 8)); },
                             {"[attention_forward]", "NH=6", "NKV=4"});
  testing::expect_error_with([&] { call(dims(1, 4, 2, 1, 8, 10, 12)); }, {"T_kv=12", "14"});
  testing::expect_error_with([&] { call(dims(1, 2, 2, 0, 8)); }, {"NKV=0"});
  EXPECT_THROW(attention_backward(buf.data(), buf.data(), buf.data(), buf.data(), buf.data(),
                                  buf.data(), buf.data(), buf.data(), nullptr, dims(1, 2, 2, 1, 8)),
               Error);
}

}  // namespace
}  // namespace tensorpar

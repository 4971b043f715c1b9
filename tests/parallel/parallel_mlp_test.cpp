// ParallelMlp (SwiGLU without bias, GELU-tanh with biases) at TP 1..4 with an odd ffn size
// against a double-precision reference: forward, and every gradient against central finite
// differences; the block-aligned ffn split.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "parallel/parallel_mlp.h"
#include "parallel_test_util.h"

namespace tensorpar::testing {
namespace {

constexpr int64_t C = 10, F = 37, N = 7;

struct MlpWeights {
  std::vector<double> wg, wu, wd, bu, bd;  // gate/up [F, C], down [C, F], biases (GELU only)
};

std::vector<double> reference(const std::vector<double>& x, const MlpWeights& w, MlpKind kind) {
  std::vector<double> y(size_t(N * C), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> h(static_cast<size_t>(F));
    for (int64_t f = 0; f < F; ++f) {
      double u = 0, gt = 0;
      for (int64_t c = 0; c < C; ++c) {
        u += x[size_t(n * C + c)] * w.wu[size_t(f * C + c)];
        gt += x[size_t(n * C + c)] * w.wg[size_t(f * C + c)];
      }
      if (kind == MlpKind::kSwiGlu) {
        h[size_t(f)] = gt / (1 + std::exp(-gt)) * u;
      } else {
        u += w.bu[size_t(f)];
        h[size_t(f)] = 0.5 * u * (1 + std::tanh(std::sqrt(2 / M_PI) * (u + 0.044715 * u * u * u)));
      }
    }
    for (int64_t c = 0; c < C; ++c) {
      double s = kind == MlpKind::kGeluTanh ? w.bd[size_t(c)] : 0.0;
      for (int64_t f = 0; f < F; ++f) s += h[size_t(f)] * w.wd[size_t(c * F + f)];
      y[size_t(n * C + c)] = s;
    }
  }
  return y;
}

TEST(ParallelMlp, ForwardAndBackwardMatchReference) {
  TP_SEED_TRACE();
  for (MlpKind kind : {MlpKind::kSwiGlu, MlpKind::kGeluTanh}) {
    const bool bias = kind == MlpKind::kGeluTanh;
    SCOPED_TRACE(bias ? "gelu" : "swiglu");
    Rng rng(bias ? 3 : 4);
    auto rnd = [&](int64_t n, float s) {
      auto v = rng.uniform_vec(size_t(n), -s, s);
      return std::vector<double>(v.begin(), v.end());
    };
    MlpWeights w{rnd(F * C, 0.5f), rnd(F * C, 0.5f), rnd(C * F, 0.3f), rnd(F, 0.2f), rnd(C, 0.2f)};
    std::vector<double> x = rnd(N * C, 1.0f), g = rnd(N * C, 1.0f);
    auto loss = [&] {
      const auto y = reference(x, w, kind);
      double s = 0;
      for (size_t i = 0; i < y.size(); ++i) s += y[i] * g[i];
      return s;
    };
    const auto yd = reference(x, w, kind);
    const std::vector<float> y_ref(yd.begin(), yd.end());
    const auto dx_ref = numeric_grad(x, loss), dwu_ref = numeric_grad(w.wu, loss), dwd_ref = numeric_grad(w.wd, loss),
               dwg_ref = numeric_grad(w.wg, loss), dbu_ref = numeric_grad(w.bu, loss), dbd_ref = numeric_grad(w.bd, loss);
    auto t = [](const std::vector<double>& v, Shape s) { return tensor_of(s, std::vector<float>(v.begin(), v.end())); };
    for (int tp = 1; tp <= 4; ++tp) {
      SCOPED_TRACE("tp " + std::to_string(tp));
      run_ranks(tp, [&](Communicator& world) {
        ParallelMlp m(C, F, kind, bias, mlp_ffn_ranges(F, tp, 1), world.rank());
        if (bias) {
          m.in().load(slice_of(t(w.wu, {F, C})), slice_of(t(w.bu, {F})));
        } else {
          const SliceLoader gate_up[2] = {slice_of(t(w.wg, {F, C})), slice_of(t(w.wu, {F, C}))};
          m.in().load(gate_up);
        }
        m.down().load(slice_of(t(w.wd, {C, F})), bias ? slice_of(t(w.bd, {C})) : nullptr);
        MatmulEngine eng;
        const Tensor xt = t(x, {N, C});
        Tensor y = nan_tensor({N, C}), dx = nan_tensor({N, C});
        MlpActs acts;
        m.forward(eng, y, xt, acts, world);
        EXPECT_LE(max_rel_diff(y.to_vector(), y_ref, 0.1), 2e-5);
        m.backward(eng, dx, t(g, {N, C}), xt, acts, world);
        EXPECT_LE(max_rel_diff(dx.to_vector(), dx_ref, 0.1), 1e-4);
        const Range fr = m.ffn_range();
        const int64_t up = bias ? 0 : 1;  // the part holding up_proj / c_fc
        EXPECT_LE(max_rel_diff(m.in().part_d_weight(up).to_vector(), rows_of(dwu_ref, C, fr), 0.1), 1e-4);
        EXPECT_LE(max_rel_diff(m.down().d_weight().to_vector(), columns(dwd_ref, C, F, fr), 0.1), 1e-4);
        if (bias) {
          EXPECT_LE(max_rel_diff(m.in().part_d_bias(0).to_vector(), rows_of(dbu_ref, 1, fr), 0.1), 1e-4);
          EXPECT_LE(max_rel_diff(m.down().d_bias().to_vector(), dbd_ref, 0.1), 1e-4);
        } else {
          EXPECT_LE(max_rel_diff(m.in().part_d_weight(0).to_vector(), rows_of(dwg_ref, C, fr), 0.1), 1e-4);
        }
      });
    }
  }
}

TEST(ParallelMlp, FfnRangesAlignToBlocks) {
  for (int tp = 1; tp <= 5; ++tp) {
    const auto r = mlp_ffn_ranges(1536, tp, 32);
    EXPECT_TRUE(ranges_tile(r, 1536));
    for (const Range& x : r) EXPECT_EQ(x.begin % 32, 0);
  }
  EXPECT_EQ(mlp_ffn_ranges(37, 2, 32), partition_even_all(37, 2));  // not a multiple: plain split
}

}  // namespace
}  // namespace tensorpar::testing

// ParallelAttention at TP 1, 2, 3, 4 and 7 (kv heads replicated, ranks without heads) against a
// double-precision reference (projections, half-split RoPE, causal GQA softmax, o_proj):
// forward (dense training rows and paged chunks) and every gradient against central finite
// differences of the reference.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

#include "parallel/parallel_attention.h"
#include "parallel/rng.h"
#include "parallel_test_util.h"

namespace tensorpar::testing {
namespace {

constexpr int64_t C = 12, NH = 6, NKV = 2, HS = 4, B = 2, T = 5, N = B * T;
constexpr double kTheta = 100.0;

struct Weights {
  std::vector<double> wq, wk, wv, wo, bq, bk, bv, bo;  // [out, in] row-major
};

// out (N, C) of the reference; positions t within each sequence.
std::vector<double> reference(const std::vector<double>& x, const Weights& w) {
  auto lin = [](const std::vector<double>& in, const std::vector<double>& W, const std::vector<double>& b,
                int64_t rows, int64_t out, int64_t inn) {
    std::vector<double> y(size_t(rows * out));
    for (int64_t n = 0; n < rows; ++n)
      for (int64_t o = 0; o < out; ++o) {
        double s = b[size_t(o)];
        for (int64_t i = 0; i < inn; ++i) s += in[size_t(n * inn + i)] * W[size_t(o * inn + i)];
        y[size_t(n * out + o)] = s;
      }
    return y;
  };
  auto q = lin(x, w.wq, w.bq, N, NH * HS, C), k = lin(x, w.wk, w.bk, N, NKV * HS, C), v = lin(x, w.wv, w.bv, N, NKV * HS, C);
  auto rope = [](std::vector<double>& t, int64_t heads) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t i = 0; i < HS / 2; ++i) {
          const double a = double(n % T) * std::pow(kTheta, -2.0 * double(i) / double(HS));
          double* p = &t[size_t((n * heads + h) * HS)];
          const double x0 = p[i], x1 = p[i + HS / 2];
          p[i] = x0 * std::cos(a) - x1 * std::sin(a);
          p[i + HS / 2] = x0 * std::sin(a) + x1 * std::cos(a);
        }
  };
  rope(q, NH);
  rope(k, NKV);
  std::vector<double> att(size_t(N * NH * HS), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < NH; ++h)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t kh = h / (NH / NKV);
        std::vector<double> s(size_t(t + 1));
        double mx = -1e300, sum = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double d = 0;
          for (int64_t i = 0; i < HS; ++i)
            d += q[size_t(((b * T + t) * NH + h) * HS + i)] * k[size_t(((b * T + u) * NKV + kh) * HS + i)];
          s[size_t(u)] = d / std::sqrt(double(HS));
          mx = std::max(mx, s[size_t(u)]);
        }
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (int64_t u = 0; u <= t; ++u)
          for (int64_t i = 0; i < HS; ++i)
            att[size_t(((b * T + t) * NH + h) * HS + i)] += s[size_t(u)] / sum * v[size_t(((b * T + u) * NKV + kh) * HS + i)];
      }
  return lin(att, w.wo, w.bo, N, C, NH * HS);
}

double loss_of(const std::vector<double>& x, const Weights& w, const std::vector<double>& g) {
  const auto y = reference(x, w);
  double s = 0;
  for (size_t i = 0; i < y.size(); ++i) s += y[i] * g[i];
  return s;
}

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<float> as_float(const std::vector<double>& v) { return {v.begin(), v.end()}; }

TEST(ParallelAttention, ForwardAndBackwardMatchReferenceAtAnyTp) {
  TP_SEED_TRACE();
  Rng rng(11);
  Weights w;
  auto rnd = [&](int64_t n, float s) { return as_double(rng.uniform_vec(size_t(n), -s, s)); };
  w.wq = rnd(NH * HS * C, 0.4f), w.wk = rnd(NKV * HS * C, 0.4f), w.wv = rnd(NKV * HS * C, 0.4f);
  w.wo = rnd(C * NH * HS, 0.3f), w.bq = rnd(NH * HS, 0.1f), w.bk = rnd(NKV * HS, 0.1f), w.bv = rnd(NKV * HS, 0.1f);
  w.bo = rnd(C, 0.1f);
  std::vector<double> x = rnd(N * C, 1.0f), g = rnd(N * C, 1.0f);
  const auto y_ref = as_float(reference(x, w));
  auto loss = [&] { return loss_of(x, w, g); };
  const auto dx_ref = numeric_grad(x, loss), dwq_ref = numeric_grad(w.wq, loss), dwk_ref = numeric_grad(w.wk, loss),
             dwv_ref = numeric_grad(w.wv, loss), dwo_ref = numeric_grad(w.wo, loss), dbq_ref = numeric_grad(w.bq, loss),
             dbk_ref = numeric_grad(w.bk, loss), dbo_ref = numeric_grad(w.bo, loss);
  AttentionShape s{C, NH, NKV, HS, true, true};
  const RopeTable rope = RopeTable::make(HS, kTheta, RopeLayout::kHalfSplit);
  auto full = [](const std::vector<double>& v, Shape shape) { return tensor_of(shape, as_float(v)); };
  for (int tp : {1, 2, 3, 4, 7}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    std::mutex mu;
    std::vector<float> dwq(dwq_ref.size(), NAN), dwo(dwo_ref.size(), NAN);
    std::map<int64_t, std::vector<float>> kv_grads;  // first kv head -> the first copy's gradients
    run_ranks(tp, [&](Communicator& world) {
      ParallelAttention a(s, &rope, tp, world.rank());
      const SliceLoader qkv[3] = {slice_of(full(w.wq, {NH * HS, C})), slice_of(full(w.wk, {NKV * HS, C})),
                                  slice_of(full(w.wv, {NKV * HS, C}))};
      const SliceLoader qkv_b[3] = {slice_of(full(w.bq, {NH * HS})), slice_of(full(w.bk, {NKV * HS})),
                                    slice_of(full(w.bv, {NKV * HS}))};
      a.qkv().load(qkv, qkv_b);
      a.o().load(slice_of(full(w.wo, {C, NH * HS})), slice_of(full(w.bo, {C})));
      const HeadRange& h = a.heads();
      auto kv_group = world.split(h.kv.empty() ? int(NKV) + world.rank() : int(h.kv.begin), world.rank());
      MatmulEngine eng;
      std::vector<int64_t> pos(N);
      for (int64_t n = 0; n < N; ++n) pos[size_t(n)] = n % T;
      const Tensor xt = full(x, {N, C});
      Tensor y = nan_tensor({N, C});
      AttentionActs acts;
      AttentionRows dense;
      dense.positions = pos.data(), dense.B = B, dense.T = T;
      a.forward(eng, y, xt, dense, acts, world);
      EXPECT_LE(max_rel_diff(y.to_vector(), y_ref, 0.1), 2e-5);
      // The same forward with paged rows, on sequence 1 in chunks of 2 and T - 2 tokens over
      // blocks of 2 tokens in reverse pool order, gives the same rows.
      const int64_t bsz = 2, nb = (T + bsz - 1) / bsz;
      std::vector<int32_t> table;
      for (int64_t b = nb - 1; b >= 0; --b) table.push_back(int32_t(b));
      std::vector<float> kc(size_t(std::max<int64_t>(1, nb * bsz * a.kv_local() * HS))), vc(kc.size());
      AttentionActs scratch;
      for (int64_t c0 : {int64_t(0), int64_t(2)}) {
        const int64_t n = c0 == 0 ? 2 : T - 2;
        Tensor xc = xt.slice(0, T + c0, T + c0 + n).contiguous(), yc = nan_tensor({n, C});
        PagedSeq ps;
        ps.row_begin = 0, ps.T = n, ps.pos0 = c0, ps.blocks = table.data(), ps.n_blocks = nb;
        AttentionRows paged;
        paged.positions = pos.data() + c0, paged.seqs = std::span<const PagedSeq>(&ps, 1);
        paged.k_pool = kc.data(), paged.v_pool = vc.data(), paged.block_size = bsz;
        a.forward(eng, yc, xc, paged, scratch, world);
        EXPECT_LE(max_abs_diff(yc.to_vector(), y.slice(0, T + c0, T + c0 + n).to_vector()), 1e-5);
      }
      Tensor dx = nan_tensor({N, C});
      a.backward(eng, dx, full(g, {N, C}), xt, dense, acts, world, kv_group.get());
      EXPECT_LE(max_rel_diff(dx.to_vector(), dx_ref, 0.1), 1e-4);
      // k/v copies each hold the full gradient of their kv head.
      const Range kr{h.kv.begin * HS * C, h.kv.end * HS * C};
      ColumnParallelLinear& p = a.qkv();
      if (!h.kv.empty()) {
        EXPECT_LE(max_rel_diff(p.part_d_weight(kPartK).to_vector(), rows_of(dwk_ref, 1, kr), 0.1), 1e-4);
        EXPECT_LE(max_rel_diff(p.part_d_weight(kPartV).to_vector(), rows_of(dwv_ref, 1, kr), 0.1), 1e-4);
        EXPECT_LE(max_rel_diff(p.part_d_bias(kPartK).to_vector(), rows_of(dbk_ref, HS, h.kv), 0.1), 1e-4);
        EXPECT_LE(max_rel_diff(p.part_d_bias(kPartQ).to_vector(), rows_of(dbq_ref, HS, h.q), 0.1), 1e-4);
      }
      EXPECT_LE(max_rel_diff(a.o().d_bias().to_vector(), dbo_ref, 0.1), 1e-4);
      std::lock_guard<std::mutex> lock(mu);
      // The copies of a replicated kv head hold bitwise one gradient (else the copies' weights
      // drift apart over training steps).
      if (!h.kv.empty()) {
        std::vector<float> kv = p.part_d_weight(kPartK).to_vector();
        for (const std::vector<float>& part : {p.part_d_weight(kPartV).to_vector(), p.part_d_bias(kPartK).to_vector(),
                                               p.part_d_bias(kPartV).to_vector()})
          kv.insert(kv.end(), part.begin(), part.end());
        const auto [it, first] = kv_grads.emplace(h.kv.begin, kv);
        if (!first) {
          EXPECT_TRUE(it->second == kv) << "kv head " << h.kv.begin << ", rank " << world.rank();
        }
      }
      const auto q = a.qkv().part_d_weight(kPartQ).to_vector();
      std::copy(q.begin(), q.end(), dwq.begin() + h.q.begin * HS * C);
      const Range orng = a.o().in_range();
      const auto o = a.o().d_weight().to_vector();
      for (int64_t r = 0; r < C; ++r)
        for (int64_t j = 0; j < orng.size(); ++j) dwo[size_t(r * NH * HS + orng.begin + j)] = o[size_t(r * orng.size() + j)];
    });
    EXPECT_LE(max_rel_diff(dwq, dwq_ref, 0.1), 1e-4);
    EXPECT_LE(max_rel_diff(dwo, dwo_ref, 0.1), 1e-4);
  }
}

TEST(ParallelAttention, KvCopiesWhenKvReplicated) {
  AttentionShape s{C, NH, NKV, HS, false, false};
  run_ranks(3, [&](Communicator& world) {
    ParallelAttention a(s, nullptr, 3, world.rank());
    EXPECT_EQ(a.kv_copies(), world.rank() == 2 ? 1 : 2);  // kv 0 on ranks 0, 1; kv 1 on rank 2
  });
}

}  // namespace
}  // namespace tensorpar::testing

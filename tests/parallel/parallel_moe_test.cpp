// ParallelMoe: the mixture-of-experts block against the naive double-precision reference
// (moe_forward_naive) with every expert split: experts over EP ranks (5 experts: uneven at ep 2, 3,
// 4), each expert's ffn over expert-TP ranks, with and without renormalised top-k and a shared
// expert. Replicated tokens (EP inside the TP group) and all_to_all dispatch (EP ranks holding
// different tokens, one of them possibly none) give the single-rank forward, input gradients and
// weight gradients (the router's summed over the EP ranks, whose tokens differ).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>

#include "parallel/parallel_moe.h"
#include "parallel_test_util.h"

namespace tensorpar::testing {
namespace {

constexpr int64_t C = 12, E = 5, K = 2, F = 20, FS = 16;

struct MoeWeights {
  Tensor router, shared_gate_w, shared_gate, shared_up, shared_down;
  std::vector<Tensor> gate, up, down;
};

MoeWeights random_weights(Rng& rng) {
  MoeWeights w;
  w.router = rng.uniform_tensor({E, C}, DType::kF32, -0.8f, 0.8f);
  for (int64_t e = 0; e < E; ++e) {
    w.gate.push_back(rng.uniform_tensor({F, C}, DType::kF32, -0.5f, 0.5f));
    w.up.push_back(rng.uniform_tensor({F, C}, DType::kF32, -0.5f, 0.5f));
    w.down.push_back(rng.uniform_tensor({C, F}, DType::kF32, -0.3f, 0.3f));
  }
  w.shared_gate = rng.uniform_tensor({FS, C}, DType::kF32, -0.5f, 0.5f);
  w.shared_up = rng.uniform_tensor({FS, C}, DType::kF32, -0.5f, 0.5f);
  w.shared_down = rng.uniform_tensor({C, FS}, DType::kF32, -0.3f, 0.3f);
  w.shared_gate_w = rng.uniform_tensor({1, C}, DType::kF32, -0.5f, 0.5f);
  return w;
}

void load(ParallelMoe& m, const MoeWeights& w) {
  m.router_weight() = w.router.clone();
  for (int64_t e = m.local_experts().begin; e < m.local_experts().end; ++e) {
    const SliceLoader gu[2] = {slice_of(w.gate[size_t(e)]), slice_of(w.up[size_t(e)])};
    m.expert(e).in().load(gu);
    m.expert(e).down().load(slice_of(w.down[size_t(e)]));
  }
  if (m.has_shared()) {
    const SliceLoader gu[2] = {slice_of(w.shared_gate), slice_of(w.shared_up)};
    m.shared().in().load(gu);
    m.shared().down().load(slice_of(w.shared_down));
    m.shared_gate_weight() = w.shared_gate_w.clone();
  }
}

// This rank's block with EP inside the TP group `world` (ep divides its size), weights loaded.
ParallelMoe replicated_moe(const MoeShape& ms, const MoeWeights& w, Communicator& world, int ep) {
  const int etp = world.size() / ep, r = world.rank();
  ParallelMoe m(ms, ExpertSplit{ep, r / etp, etp, r % etp, world.size(), r}, 1);
  load(m, w);
  return m;
}

MoeShape shape_of(bool norm, bool shared) { return MoeShape{C, E, K, F, norm, shared ? FS : 0}; }

// moe_forward_naive of x with w's weights (the shared expert's when ms has one).
Tensor reference(const Tensor& x, const MoeShape& ms, const MoeWeights& w) {
  const bool shared = ms.shared_ffn > 0;
  Tensor ref;
  moe_forward_naive(ref, x, ms, w.router, w.gate, w.up, w.down, shared ? &w.shared_gate : nullptr,
                    shared ? &w.shared_up : nullptr, shared ? &w.shared_down : nullptr,
                    shared ? &w.shared_gate_w : nullptr);
  return ref;
}

// Global gradients of one run: d_x rows by token, each expert's full gate/up/down gradient, the
// router's and the shared gate's summed over the EP ranks.
struct MoeGrads {
  std::vector<float> y, dx;
  std::map<std::string, std::vector<float>> w;
};

// Places this rank's expert-slice gradients into g; with `router`, adds its router gradient (one
// rank per EP rank passes it: the router's gradient is Replicated over expert-TP).
void collect(MoeGrads& g, std::mutex& mu, ParallelMoe& m, bool router) {
  std::lock_guard<std::mutex> lock(mu);
  auto add = [&](const std::string& name, const std::vector<float>& v, int64_t rows, int64_t cols, int dim, Range r) {
    auto& dst = g.w[name];
    if (dst.empty()) dst.assign(size_t(rows * cols), 0.0f);
    for (int64_t i = 0; i < (dim == 0 ? r.size() : rows); ++i)
      for (int64_t j = 0; j < (dim == 0 ? cols : r.size()); ++j) {
        const int64_t gi = dim == 0 ? r.begin + i : i, gj = dim == 0 ? j : r.begin + j;
        const float x = v[size_t(i * (dim == 0 ? cols : r.size()) + j)];
        dst[size_t(gi * cols + gj)] = name == "router" ? dst[size_t(gi * cols + gj)] + x : x;
      }
  };
  for (int64_t e = m.local_experts().begin; e < m.local_experts().end; ++e) {
    ParallelMlp& x = m.expert(e);
    const Range fr = x.ffn_range();
    add("gate" + std::to_string(e), x.in().part_d_weight(0).to_vector(), F, C, 0, fr);
    add("up" + std::to_string(e), x.in().part_d_weight(1).to_vector(), F, C, 0, fr);
    add("down" + std::to_string(e), x.down().d_weight().to_vector(), C, F, 1, fr);
  }
  if (router) add("router", m.router_grad().to_vector(), E, C, 0, {0, E});
}

TEST(ParallelMoe, ReplicatedTokensMatchReferenceAtEveryTpAndEp) {
  TP_SEED_TRACE();
  Rng rng(11);
  const MoeWeights w = random_weights(rng);
  const int64_t N = 9;
  const Tensor x = rng.uniform_tensor({N, C}, DType::kF32, -1.5f, 1.5f);
  for (const bool norm : {false, true})
    for (const bool shared : {false, true}) {
      const MoeShape ms = shape_of(norm, shared);
      const Tensor ref = reference(x, ms, w);
      for (int tp = 1; tp <= 4; ++tp)
        for (int ep = 1; ep <= tp; ++ep) {
          if (tp % ep) continue;
          SCOPED_TRACE("tp " + std::to_string(tp) + " ep " + std::to_string(ep) + (norm ? " norm" : "") +
                       (shared ? " shared" : ""));
          run_ranks(tp, [&](Communicator& world) {
            ParallelMoe m = replicated_moe(ms, w, world, ep);
            MatmulEngine eng;
            Tensor y = nan_tensor({N, C});
            MoeActs acts;
            m.forward(eng, y, x, acts, world, nullptr);
            EXPECT_LE(max_rel_diff(y.to_vector(), ref.to_vector(), 0.1), 2e-5);
          });
        }
    }
}

// A capacity factor drops the slots over ceil(factor * N * K / E) per expert, first choices first:
// the drop count is what the routing implies, a large factor drops nothing (bitwise the dropless
// output), and every (tp, ep) split drops the same slots (the same output as tp 1).
TEST(ParallelMoe, CapacityFactorDropsTheSameSlotsAtEverySplit) {
  TP_SEED_TRACE();
  Rng rng(13);
  const MoeWeights w = random_weights(rng);
  const int64_t N = 23;
  const Tensor x = rng.uniform_tensor({N, C}, DType::kF32, -1.5f, 1.5f);
  const MoeShape ms = shape_of(true, true);
  for (const double factor : {0.6, 1.0, 100.0}) {
    std::vector<float> one, dropless;
    for (int tp = 1; tp <= 4; ++tp)
      for (int ep = 1; ep <= tp; ++ep) {
        if (tp % ep) continue;
        SCOPED_TRACE("factor " + std::to_string(factor) + " tp " + std::to_string(tp) + " ep " + std::to_string(ep));
        std::vector<float> y0;
        run_ranks(tp, [&](Communicator& world) {
          const int r = world.rank();
          ParallelMoe m = replicated_moe(ms, w, world, ep);
          MatmulEngine eng;
          Tensor y = nan_tensor({N, C});
          MoeActs acts;
          if (tp == 1) {
            m.forward(eng, y, x, acts, world, nullptr, 0);
            dropless = y.to_vector();
          }
          m.forward(eng, y, x, acts, world, nullptr, factor);
          // The expected drops from the routing: per expert, its slots beyond the capacity.
          const int64_t cap = int64_t(std::ceil(factor * double(N * K) / double(E)));
          int64_t want = 0;
          for (int64_t e = 0; e < E; ++e) want += std::max<int64_t>(0, int64_t(acts.expert_count[size_t(e)]) - cap);
          EXPECT_EQ(acts.dropped_slots, want);
          if (factor < 1) {
            EXPECT_GT(acts.dropped_slots, 0);
          }
          if (r == 0) y0 = y.to_vector();
        });
        if (tp == 1) {
          one = y0;
          if (factor > 10) {
            EXPECT_EQ(one, dropless);
          } else if (factor < 1) {
            EXPECT_GT(max_abs_diff(one, dropless), 1e-3);
          }
          continue;
        }
        EXPECT_LE(max_rel_diff(y0, one, 0.1), 1e-5);
      }
  }
}

// The dispatch path against the single-rank one: ranks = ep x etp (etp fastest); EP rank r holds
// tokens partition_even(N, ep)[r]. Forward rows, input gradients and weight gradients must
// equal those of one rank holding every token (which the model tests hold against PyTorch).
TEST(ParallelMoe, DispatchedTokensMatchOneRank) {
  TP_SEED_TRACE();
  Rng rng(12);
  const MoeWeights w = random_weights(rng);
  for (const int64_t N : {int64_t(11), int64_t(2)}) {
    const Tensor x = rng.uniform_tensor({N, C}, DType::kF32, -1.5f, 1.5f);
    const Tensor dy = rng.uniform_tensor({N, C}, DType::kF32, -1.0f, 1.0f);
    std::vector<float> aux(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) aux[size_t(e)] = 0.01f * float(e + 1);
    for (const bool shared : {false, true}) {
      const MoeShape ms = shape_of(true, shared);
      const Tensor ref = reference(x, ms, w);
      MoeGrads one;
      for (const auto& [ep, etp] : {std::pair{1, 1}, std::pair{2, 1}, std::pair{3, 1}, std::pair{2, 2}, std::pair{4, 1}}) {
        SCOPED_TRACE("N " + std::to_string(N) + " ep " + std::to_string(ep) + " etp " + std::to_string(etp) +
                     (shared ? " shared" : ""));
        MoeGrads got;
        got.y.assign(size_t(N * C), NAN);
        got.dx.assign(size_t(N * C), NAN);
        std::mutex mu;
        run_ranks(ep * etp, [&](Communicator& world) {
          const int tr = world.rank() % etp, er = world.rank() / etp;
          auto tp = world.split(er, tr);
          auto epg = world.split(tr, er);
          ParallelMoe m(ms, ExpertSplit{ep, er, etp, tr, etp, tr}, 1);
          load(m, w);
          const Range rows = partition_even(N, ep, er);
          const Tensor xr = x.slice(0, rows.begin, rows.end).contiguous();
          MatmulEngine eng;
          Tensor y = Tensor::empty({rows.size(), C}, DType::kF32), dx = Tensor::empty({rows.size(), C}, DType::kF32);
          MoeActs acts;
          m.forward(eng, y, xr, acts, *tp, epg.get());
          m.backward(eng, dx, dy.slice(0, rows.begin, rows.end).contiguous(), xr, acts, aux, 0.05f, *tp, epg.get());
          {
            std::lock_guard<std::mutex> lock(mu);
            const auto yv = y.to_vector(), dv = dx.to_vector();
            std::copy(yv.begin(), yv.end(), got.y.begin() + rows.begin * C);
            std::copy(dv.begin(), dv.end(), got.dx.begin() + rows.begin * C);
          }
          collect(got, mu, m, tr == 0);
        });
        EXPECT_LE(max_rel_diff(got.y, ref.to_vector(), 0.1), 2e-5);
        if (ep == 1 && etp == 1) {
          one = got;
          continue;
        }
        EXPECT_LE(max_rel_diff(got.dx, one.dx, 0.1), 1e-5);
        for (const auto& [name, g] : one.w) EXPECT_LE(max_rel_diff(got.w.at(name), g, 0.1), 1e-5) << name;
      }
    }
  }
}

}  // namespace
}  // namespace tensorpar::testing

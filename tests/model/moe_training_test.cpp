// Mixture-of-experts training conformance (tools/make_moe_fixtures.py): the loss and every
// gradient of one batch against PyTorch's (float64) for Mixtral, Qwen2-MoE and Qwen3-MoE, with the
// auxiliary load-balancing loss off (grads.safetensors) and at coefficient 0.02
// (grads_with_aux.safetensors, aux_loss.json), at every (tp, ep) with ep dividing tp up to 4
// ranks: per-tensor ||a - b|| / ||b|| <= 1e-4, loss within 1e-5 relative; the router's
// gradients bitwise equal on every rank; the per-layer expert load equal to the reference counts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <utility>

#include "io/safetensors.h"
#include "model/model_test_util.h"
#include "model/transformer.h"

namespace tensorpar::testing {
namespace {

struct MoeGradRun {
  float loss = 0;
  Gathered grads;
  std::map<std::string, Shape> shapes;
  std::map<std::string, std::vector<std::vector<float>>> replicated;  // per rank
  std::vector<std::vector<double>> load;                               // rank 0's expert load per MoE layer
};

MoeGradRun moe_grads(const std::string& dir, int tp, int ep, double coef, const Tensor& tokens, const Tensor& targets,
                     bool overlap_tp_backward = true) {
  MoeGradRun r;
  std::mutex mu;
  run_model_ranks(tp, [&](Communicator& world) {
    auto m = load_model(dir, world, {}, ExpertParallel{ep, nullptr});
    m->set_train_compute({.moe_aux_loss_coef = coef, .overlap_tp_backward = overlap_tp_backward});
    m->zero_grad();
    m->forward_backward(tokens, targets, 0.5f);  // two half-scaled micro-batches of the same data
    const float loss = m->forward_backward(tokens, targets, 0.5f);
    if (world.rank() == 0) {
      r.loss = loss;
      r.load = dynamic_cast<Transformer&>(*m).expert_load();
    }
    for (const ParamShard& p : m->parameters()) {
      gather_into(r.grads, mu, p, *p.grad);
      std::lock_guard<std::mutex> lock(mu);
      r.shapes[p.name] = p.global_shape;
      if (p.shard_dim < 0) r.replicated[p.name].push_back(p.grad->to_vector());
    }
  });
  return r;
}

class MoeGradients : public ::testing::TestWithParam<const char*> {};

TEST_P(MoeGradients, MatchPyTorchWithAndWithoutAuxLoss) {
  const std::string dir = model_fixture(GetParam());
  const Tensor tokens = ids_tensor(read_id_lines(dir + "/train_inputs.txt"));
  const Tensor targets = ids_tensor(read_id_lines(dir + "/train_targets.txt"));
  std::ifstream tf(dir + "/train.json"), af(dir + "/aux_loss.json");
  const auto train = nlohmann::json::parse(tf), aux = nlohmann::json::parse(af);
  const int64_t experts = read_model_config(dir).moe.n_experts;
  for (const double coef : {0.0, aux["router_aux_loss_coef"].get<double>()}) {
    const double ref_loss = coef == 0 ? train["losses"][0].get<double>() : aux["total_loss"].get<double>();
    auto ref = SafetensorsFile::open(dir + (coef == 0 ? "/grads.safetensors" : "/grads_with_aux.safetensors"));
    for (int tp = 1; tp <= 4; ++tp)
      for (int ep = 1; ep <= tp; ++ep) {
        if (tp % ep != 0 || ep > experts) continue;
        SCOPED_TRACE(std::string(GetParam()) + " tp " + std::to_string(tp) + " ep " + std::to_string(ep) + " coef " +
                     std::to_string(coef));
        const MoeGradRun r = moe_grads(dir, tp, ep, coef, tokens, targets);
        EXPECT_NEAR(r.loss, ref_loss, 1e-5 * std::fabs(ref_loss));
        double worst = 0;
        for (const auto& [name, g] : r.grads) {
          const auto want = fixture_tensor(*ref, name, r.shapes.at(name));
          ASSERT_EQ(g.size(), want.size()) << name;
          const double q = norm_ratio(g, want);
          worst = std::max(worst, q);
          EXPECT_LE(q, 1e-4) << name;
        }
        expect_covers_fixture(*ref, r.shapes, "gradients");
        for (const auto& [name, copies] : r.replicated)
          for (const auto& c : copies) EXPECT_EQ(c, copies[0]) << name << " differs across ranks";
        // The expert load of the last forward: the reference's top-k counts per MoE layer.
        ASSERT_EQ(r.load.size(), aux["expert_counts"].size());
        size_t i = 0;
        for (const auto& [layer, counts] : aux["expert_counts"].items())
          EXPECT_EQ(r.load[i++], counts.get<std::vector<double>>()) << "MoE layer " << layer;
        std::printf("  %s tp %d ep %d coef %g: loss %.6f (ref %.6f), worst grad norm ratio %.3g over %zu tensors\n",
                    GetParam(), tp, ep, coef, r.loss, ref_loss, worst, r.grads.size());
      }
  }
}

// The sum of the input gradient overlapped with the shared expert's, the router's and the shared
// gate's gradients (overlap_tp_backward, the default) adds the same partials as the in-line sum:
// loss and every gradient bitwise those of a run without it, at tp 2 and 3 with and without
// expert parallelism (qwen2_moe_tiny has a shared expert: the sum starts inside its backward).
TEST_P(MoeGradients, OverlappedTpBackwardGivesIdenticalGradients) {
  const std::string dir = model_fixture(GetParam());
  const Tensor tokens = ids_tensor(read_id_lines(dir + "/train_inputs.txt"));
  const Tensor targets = ids_tensor(read_id_lines(dir + "/train_targets.txt"));
  const int64_t experts = read_model_config(dir).moe.n_experts;
  for (const auto& [tp, ep] : {std::pair{2, 1}, std::pair{2, 2}, std::pair{3, 1}, std::pair{3, 3}}) {
    if (ep > experts) continue;
    SCOPED_TRACE(std::string(GetParam()) + " tp " + std::to_string(tp) + " ep " + std::to_string(ep));
    const MoeGradRun inline_sum = moe_grads(dir, tp, ep, 0.02, tokens, targets, false);
    const MoeGradRun overlapped = moe_grads(dir, tp, ep, 0.02, tokens, targets, true);
    EXPECT_EQ(overlapped.loss, inline_sum.loss);
    ASSERT_EQ(overlapped.grads.size(), inline_sum.grads.size());
    for (const auto& [name, g] : inline_sum.grads) EXPECT_EQ(overlapped.grads.at(name), g) << name;
  }
}

// The router z-loss (no external reference computes it for these models): coef * mean lse^2 over
// every MoE layer's tokens. Its gradient on the router weights (the gradient with the loss minus
// the one without) against central differences of (loss with it - loss without), which is
// coef * z exactly: smooth in the router weights, whatever the routing does.
TEST(MoeZLoss, RouterGradientMatchesFiniteDifferences) {
  const std::string dir = model_fixture("qwen3_moe_tiny");
  const Tensor tokens = ids_tensor(read_id_lines(dir + "/train_inputs.txt"));
  const Tensor targets = ids_tensor(read_id_lines(dir + "/train_targets.txt"));
  const std::string router = "model.layers.1.mlp.gate.weight";
  const double coef = 0.1, h = 1e-2;
  for (const int ep : {1, 2}) {
    SCOPED_TRACE("tp 2 ep " + std::to_string(ep));
    run_model_ranks(2, [&](Communicator& world) {
      auto m = load_model(dir, world, {}, ExpertParallel{ep, nullptr});
      auto grad_of = [&](double c) {
        m->set_train_compute({.moe_aux_loss_coef = 0, .moe_z_loss_coef = c});
        m->zero_grad();
        m->forward_backward(tokens, targets, 1.0f);
        for (const ParamShard& p : m->parameters())
          if (p.name == router) return p.grad->to_vector();
        ADD_FAILURE() << "no parameter " << router;
        return std::vector<float>{};
      };
      const std::vector<float> with = grad_of(coef), without = grad_of(0);
      Tensor* w = nullptr;
      for (const ParamShard& p : m->parameters())
        if (p.name == router) w = p.value;
      ASSERT_NE(w, nullptr);
      auto z_part = [&] {  // coef * z, as the forward adds it
        m->set_train_compute({.moe_aux_loss_coef = 0, .moe_z_loss_coef = coef});
        const double a = m->forward_loss(tokens, targets);
        m->set_train_compute({.moe_aux_loss_coef = 0, .moe_z_loss_coef = 0});
        return a - double(m->forward_loss(tokens, targets));
      };
      EXPECT_GT(z_part(), 0.0);
      for (const int64_t i : {int64_t(0), int64_t(77), w->numel() - 1}) {
        float& wi = w->data<float>()[i];
        const float keep = wi;
        wi = keep + float(h);
        const double up = z_part();
        wi = keep - float(h);
        const double down = z_part();
        wi = keep;
        const double numeric = (up - down) / (2 * h), analytic = double(with[size_t(i)]) - double(without[size_t(i)]);
        EXPECT_NEAR(analytic, numeric, 2e-3 * std::max(1.0, std::fabs(numeric))) << "router entry " << i;
        EXPECT_GT(std::fabs(analytic), 1e-4) << "router entry " << i << ": the z-loss moved nothing";
      }
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Models, MoeGradients, ::testing::Values("mixtral_tiny", "qwen2_moe_tiny", "qwen3_moe_tiny"),
                         [](const auto& info) { return std::string(info.param); });

}  // namespace
}  // namespace tensorpar::testing

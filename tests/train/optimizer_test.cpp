// AdamW over shards against PyTorch (tools/make_fixtures.py: params_after_3_steps.safetensors)
// at TP 1..4; the LR schedule; global gradient-norm clipping equal at every TP size and against a
// naive double-precision norm of the assembled gradients.
#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "train/train_test_util.h"

namespace tensorpar::testing {
namespace {

TEST(LrSchedule, WarmupThenCosine) {
  EXPECT_FLOAT_EQ(lr_at(0, 1.0f, 4, 104, 0.1f), 0.25f);
  EXPECT_FLOAT_EQ(lr_at(3, 1.0f, 4, 104, 0.1f), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(4, 1.0f, 4, 104, 0.1f), 1.0f);
  EXPECT_NEAR(lr_at(54, 1.0f, 4, 104, 0.1f), 0.55f, 1e-6);
  EXPECT_NEAR(lr_at(104, 1.0f, 4, 104, 0.1f), 0.1f, 1e-6);
  EXPECT_NEAR(lr_at(500, 1.0f, 4, 104, 0.1f), 0.1f, 1e-6);
  EXPECT_FLOAT_EQ(lr_at(7, 0.5f, 0, 0, 0.0f), 0.5f);
}

class AdamWFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(AdamWFixture, ThreeStepsMatchPyTorchAtTp1To4) {
  const std::string dir = model_fixture(GetParam());
  const Tensor tokens = ids_tensor(read_id_lines(dir + "/train_inputs.txt"));
  const Tensor targets = ids_tensor(read_id_lines(dir + "/train_targets.txt"));
  std::ifstream jf(dir + "/train.json");
  const auto meta = nlohmann::json::parse(jf);
  const auto& a = meta["adamw"];
  const AdamWConfig cfg{a["lr"].get<float>(), a["beta1"].get<float>(), a["beta2"].get<float>(),
                        a["eps"].get<float>(), a["weight_decay"].get<float>()};
  auto ref = SafetensorsFile::open(dir + "/params_after_3_steps.safetensors");
  for (int tp = 1; tp <= 4; ++tp) {
    SCOPED_TRACE(GetParam() + " tp " + std::to_string(tp));
    Gathered params;
    std::map<std::string, Shape> shapes;
    std::mutex mu;
    std::vector<std::vector<float>> losses(static_cast<size_t>(tp));
    run_model_ranks(tp, [&](Communicator& world) {
      auto m = load_model(dir, world);
      AdamW opt(cfg);
      for (int s = 0; s < 3; ++s) {
        m->zero_grad();
        losses[size_t(world.rank())].push_back(m->forward_backward(tokens, targets, 1.0f));
        std::vector<ParamShard> ps = m->parameters();
        // GPT-2's k bias has an analytically zero gradient; the reference zeroes it (README).
        for (ParamShard& p : ps)
          if (p.name.find("c_attn.k.bias") != std::string::npos) p.grad->fill_zero();
        opt.step(ps, cfg.lr);
      }
      EXPECT_EQ(opt.steps(), 3);
      for (const ParamShard& p : m->parameters()) {
        gather_into(params, mu, p, *p.value);
        std::lock_guard<std::mutex> lock(mu);
        shapes[p.name] = p.global_shape;
      }
    });
    for (const auto& l : losses)
      for (size_t s = 0; s < 3; ++s) {
        const double want = meta["losses"][s].get<double>();
        EXPECT_NEAR(l[s], want, 1e-4 * std::fabs(want)) << "step " << s;
      }
    double worst = 0;
    for (const auto& [name, v] : params) {
      const auto want = fixture_tensor(*ref, name, shapes[name]);
      ASSERT_EQ(v.size(), want.size()) << name;
      const double r = norm_ratio(v, want);
      worst = std::max(worst, r);
      EXPECT_LE(r, 1e-4) << name;
    }
    std::printf("  %s tp %d: worst param norm ratio after 3 AdamW steps %.3g over %zu tensors\n",
                GetParam().c_str(), tp, worst, params.size());
  }
}

INSTANTIATE_TEST_SUITE_P(Models, AdamWFixture, ::testing::Values("llama_gqa", "gpt2"));

// The norm of the assembled (global) gradients in double, against global_grad_norm at TP 1..4,
// with a config whose kv heads are replicated at tp > 2 (copies > 1).
TEST(ClipGradNorm, SameAtEveryTpAndMatchesNaive) {
  const ModelConfig c = tiny_llama();
  Rng rng(7);
  std::vector<std::vector<int64_t>> rows(2, std::vector<int64_t>(12)), next = rows;
  for (auto& r : rows)
    for (auto& x : r) x = rng.integer(0, 256);
  for (size_t b = 0; b < rows.size(); ++b)
    for (size_t t = 0; t < rows[b].size(); ++t)
      next[b][t] = t + 1 < rows[b].size() ? rows[b][t + 1] : 3;
  const Tensor tokens = ids_tensor(rows), targets = ids_tensor(next);
  double tp1_norm = 0;
  for (int tp = 1; tp <= 4; ++tp) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    Gathered grads;
    std::mutex mu;
    std::vector<double> norms(static_cast<size_t>(tp)), after(static_cast<size_t>(tp));
    run_model_ranks(tp, [&](Communicator& world) {
      auto m = init_model(c, world, 99);
      m->zero_grad();
      m->forward_backward(tokens, targets, 1.0f);
      std::vector<ParamShard> ps = m->parameters();
      for (const ParamShard& p : ps) gather_into(grads, mu, p, *p.grad);
      norms[size_t(world.rank())] = clip_grad_norm(ps, world, 0.5);
      after[size_t(world.rank())] = global_grad_norm(ps, world);
    });
    double naive = 0;
    for (const auto& [name, g] : grads)
      for (float x : g) naive += double(x) * double(x);
    naive = std::sqrt(naive);
    if (tp == 1) tp1_norm = naive;
    for (int r = 0; r < tp; ++r) {
      EXPECT_EQ(norms[size_t(r)], norms[0]) << "rank " << r << " disagrees";
      EXPECT_NEAR(norms[size_t(r)], naive, 1e-6 * naive);
      EXPECT_NEAR(norms[size_t(r)], tp1_norm, 1e-4 * tp1_norm);
      EXPECT_NEAR(after[size_t(r)], 0.5, 1e-4);
    }
    ASSERT_GT(naive, 0.5);
  }
}

// Hand-made shards: one Replicated on every rank, one split in two rows halves; counted once.
TEST(ClipGradNorm, HandMadeShardsCountOnce) {
  run_model_ranks(2, [&](Communicator& world) {
    Tensor rv = Tensor::zeros({3}, DType::kF32),
           rg = Tensor::from_f32({3}, std::vector<float>{1, 2, 2});
    Tensor sv = Tensor::zeros({1, 2}, DType::kF32);
    Tensor sg = world.rank() == 0 ? Tensor::from_f32({1, 2}, std::vector<float>{3, 0})
                                  : Tensor::from_f32({1, 2}, std::vector<float>{0, 4});
    std::vector<ParamShard> ps(2);
    ps[0] = {"r", &rv, &rg, {3}, -1, {0, 3}, 2};
    ps[1] = {"s", &sv, &sg, {2, 2}, 0, {world.rank(), world.rank() + 1}, 1};
    EXPECT_DOUBLE_EQ(global_grad_norm(ps, world), std::sqrt(9.0 + 25.0));
  });
}

}  // namespace
}  // namespace tensorpar::testing

// Parameter counts against Hugging Face transformers' num_parameters() on tiny configs and the
// tensor element count of the default GGUF (tests/plan/reference_models.json, made by
// tests/plan/make_reference.py), and against the closed forms of Narayanan et al. 2021.
#include "plan/model_spec.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "fixtures_dir.h"

namespace tensorpar::plan {
namespace {

nlohmann::json reference() {
  std::ifstream f(test::fixtures_dir() + "/../plan/reference_models.json");
  EXPECT_TRUE(f.good()) << "tests/plan/reference_models.json missing";
  return nlohmann::json::parse(f);
}

ModelSpec spec_of(const nlohmann::json& j) {
  ModelSpec m;
  m.name = j.at("name");
  m.layers = j.at("layers");
  m.hidden = j.at("hidden");
  m.heads = j.at("heads");
  m.kv_heads = j.at("kv_heads");
  m.head_dim = j.at("head_dim");
  m.ffn = j.at("ffn");
  m.vocab = j.at("vocab");
  m.tied_embeddings = j.at("tied");
  m.experts = j.value("experts", 0);
  m.experts_per_token = j.value("experts_per_token", 0);
  if (j.at("family") == "gpt2") {
    m.mlp = MlpMatrices::kPlain;
    m.linear_biases = true;
    m.norm_vectors = 2;
    m.positions = j.at("positions");
  } else {
    m.qkv_bias = j.at("qkv_bias");
  }
  return m;
}

TEST(ModelSpec, ParameterCountsMatchTransformersAndGguf) {
  const auto ref = reference();
  ASSERT_GE(ref.at("models").size(), 5u);
  for (const auto& j : ref.at("models")) {
    const ModelSpec m = spec_of(j);
    m.validate(m.name);
    EXPECT_EQ(total_parameters(m), j.at("parameters").get<int64_t>()) << m.name;
  }
}

TEST(ModelSpec, ActiveParametersCountOnlyRoutedExperts) {
  const auto ref = reference();  // the range must not be a temporary's member
  for (const auto& j : ref.at("models")) {
    const ModelSpec m = spec_of(j);
    if (!m.is_moe()) {
      EXPECT_EQ(active_parameters(m), total_parameters(m));
      continue;
    }
    // Independent arithmetic: one expert is 3 C F; (E - k) of them per layer are idle.
    const int64_t expert = 3 * m.hidden * m.ffn;
    EXPECT_EQ(active_parameters(m),
              total_parameters(m) - m.layers * (m.experts - m.experts_per_token) * expert);
  }
}

// Narayanan et al. 2021: P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h)); the closed form leaves out
// the final LayerNorm (2h).
TEST(ModelSpec, MegatronGptMatchesClosedForm) {
  for (auto [l, h, a] : {std::tuple{24, 2304, 24}, {96, 12288, 96}, {128, 25600, 160}}) {
    const int64_t V = 51200, s = 2048;
    const ModelSpec m = megatron_gpt(l, h, a, V, s);
    const double L = l, H = h;
    const double closed = 12 * L * H * H * (1 + 13 / (12 * H) + double(V + s) / (12 * L * H));
    EXPECT_NEAR(double(total_parameters(m)), closed + 2 * H, 1.0) << l << "x" << h;
  }
}

// Model FLOPs per iteration without recomputation: 72 B s l h^2 (1 + s/(6h) + V/(12 l h)).
TEST(ModelSpec, TrainingFlopsMatchClosedForm) {
  const int64_t l = 40, h = 6144, a = 48, V = 51200, s = 2048, B = 1024;
  const ModelSpec m = megatron_gpt(l, h, a, V, s);
  const double closed =
      72.0 * B * s * l * double(h) * h * (1 + double(s) / (6.0 * h) + double(V) / (12.0 * l * h));
  EXPECT_NEAR(model_flops_per_iteration(m, B, s) / closed, 1.0, 1e-12);
}

TEST(ModelSpec, InvalidSizesAreRejected) {
  ModelSpec m = megatron_gpt(2, 64, 4, 100, 16);
  m.kv_heads = 3;
  EXPECT_THROW(m.validate("test"), std::exception);
  m = megatron_gpt(2, 64, 4, 100, 16);
  m.experts = 4;
  m.experts_per_token = 5;
  EXPECT_THROW(m.validate("test"), std::exception);
  m.layers = 0;
  EXPECT_THROW(m.validate("test"), std::exception);
}

}  // namespace
}  // namespace tensorpar::plan

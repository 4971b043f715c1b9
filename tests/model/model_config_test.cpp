// ModelConfig from config.json text and what is derived from it, on malformed and extreme input
// (the cases tests/fuzz/hf_config_fuzz.cpp exercises): every refusal is a tensorpar::Error naming
// the field, never a JSON library exception, an overflow or an allocation sized by a bad count;
// shard_plan's byte counts stay exact for tensors whose bytes times elements overflow int64.
#include <gtest/gtest.h>

#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.h"
#include "model/model_config.h"
#include "model/model_test_util.h"
#include "model/shard_plan.h"

namespace tensorpar::testing {
namespace {

using nlohmann::json;

json fixture_config(const std::string& name) {
  std::ifstream f(model_fixture(name) + "/config.json");
  EXPECT_TRUE(f.good()) << name;
  return json::parse(f);
}

// The Error's message from parsing `j`, or "" when it parses.
std::string refusal(const json& j) {
  try {
    (void)ModelConfig::from_hf_text(j.dump(), "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void expect_refused(const json& j, const std::string& names) {
  const std::string what = refusal(j);
  EXPECT_NE(what.find(names), std::string::npos) << "'" << names << "' not in: '" << what << "' for " << j.dump();
}

TEST(ModelConfig, TextAndFileParseAlike) {
  const std::string path = model_fixture("llama_gqa") + "/config.json";
  std::ifstream f(path);
  std::stringstream text;
  text << f.rdbuf();
  EXPECT_EQ(ModelConfig::from_hf_text(text.str(), path).summary(), ModelConfig::from_hf_file(path).summary());
  try {
    (void)ModelConfig::from_hf_text("{\"model_type\": ", "cfg.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: invalid JSON"), std::string::npos) << e.what();
  }
  try {
    (void)ModelConfig::from_hf_text("{\"rope_scaling\": " + std::string(100000, '[') + std::string(100000, ']') + "}",
                                    "cfg.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cfg.json: JSON nested deeper than 128 levels"), std::string::npos)
        << e.what();
  }
}

// Found by fuzzing: a field of the wrong JSON type threw nlohmann's type_error out of the loader
// ("model_type": 6 in a Gemma 3 config).
TEST(ModelConfig, MistypedFieldsAreErrorsNamingThem) {
  json g = fixture_config("gemma3_tiny");
  g["model_type"] = 6;
  expect_refused(g, "'model_type' is 6, expected a string");
  g = fixture_config("gemma3_tiny");
  g["tie_word_embeddings"] = "yes";
  expect_refused(g, "'tie_word_embeddings'");
  g = fixture_config("gemma3_tiny");
  g["hidden_activation"] = 1;
  expect_refused(g, "'hidden_activation'");
  g = fixture_config("gemma3_tiny");
  g["use_bidirectional_attention"] = 0;
  expect_refused(g, "'use_bidirectional_attention'");
  json l = fixture_config("llama_odd");
  l["rope_scaling"]["rope_type"] = json::array();
  expect_refused(l, "'rope_type'");
  l = fixture_config("llama_odd");
  l["hidden_act"] = nullptr;  // null is absent: the default, silu
  EXPECT_EQ(refusal(l), "");
  l["attention_bias"] = "false";
  expect_refused(l, "'attention_bias'");
  json m = fixture_config("qwen3_moe_tiny");
  m["norm_topk_prob"] = 1;
  expect_refused(m, "'norm_topk_prob'");
  json p = fixture_config("gpt2");
  p["tie_word_embeddings"] = json::object();
  expect_refused(p, "'tie_word_embeddings'");
}

// Counts that size per-layer tables are bounded before anything is sized by them, and sizes whose
// products would overflow are refused (a Gemma 3 config with 10^12 layers looped filling its layer
// table; a GPT-2 one without n_inner overflowed 4 * n_embd).
TEST(ModelConfig, ExtremeSizesAreRefusedBeforeUse) {
  json g = fixture_config("gemma3_pattern");
  g.erase("layer_types");
  g["num_hidden_layers"] = int64_t(1) << 40;
  expect_refused(g, "'num_hidden_layers' is 1099511627776, expected in [1, 65536]");
  json m = fixture_config("qwen2_moe_tiny");
  m["num_hidden_layers"] = -1;
  expect_refused(m, "'num_hidden_layers' is -1");
  m = fixture_config("qwen2_moe_tiny");
  m["num_experts"] = int64_t(1) << 40;
  expect_refused(m, "num_experts");
  json p = fixture_config("gpt2");
  p.erase("n_inner");
  p["n_embd"] = std::numeric_limits<int64_t>::max();
  expect_refused(p, "sizes out of bounds");
  p = fixture_config("gpt2");
  p["n_head"] = -1;  // n_embd / n_head divided INT64_MIN by -1 for n_embd = INT64_MIN
  p["n_embd"] = std::numeric_limits<int64_t>::min();
  expect_refused(p, "'n_head' is -1");
  json l = fixture_config("llama_gqa");
  l["num_attention_heads"] = int64_t(1) << 40;
  l["num_key_value_heads"] = int64_t(1) << 40;
  expect_refused(l, "'num_attention_heads' is 1099511627776");
  l = fixture_config("llama_gqa");
  l["vocab_size"] = int64_t(1) << 40;
  expect_refused(l, "sizes out of bounds");
  l = fixture_config("llama_gqa");
  l["max_position_embeddings"] = -4;
  expect_refused(l, "max_position=-4");
}

// Floating-point settings are finite and in range. JSON cannot spell infinity (1e999 is invalid
// JSON), but a query_pre_attn_scalar of 0 made the attention scale infinite, and GGUF metadata
// can hold any float: validate refuses them all.
TEST(ModelConfig, NonFiniteOrOutOfRangeNumbersAreRefused) {
  json l = fixture_config("llama_gqa");
  l["rms_norm_eps"] = 0;
  expect_refused(l, "norm eps 0");
  l = fixture_config("llama_gqa");
  l["rope_theta"] = 0.5;
  expect_refused(l, "rope theta 0.5");
  std::string text = fixture_config("llama_gqa").dump();
  const std::string theta = "\"rope_theta\":10000.0";
  ASSERT_NE(text.find(theta), std::string::npos) << text;
  text.replace(text.find(theta), theta.size(), "\"rope_theta\":1e999");
  try {
    (void)ModelConfig::from_hf_text(text, "config.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("invalid JSON"), std::string::npos) << e.what();
  }
  json g = fixture_config("gemma3_tiny");
  g["query_pre_attn_scalar"] = 0;
  expect_refused(g, "query_scale inf");
  g = fixture_config("gemma3_tiny");
  g["rms_norm_eps"] = -1;
  expect_refused(g, "norm eps -1");
  g = fixture_config("gemma3_tiny");
  g["rope_parameters"]["sliding_attention"]["rope_theta"] = 1;
  expect_refused(g, "rope theta 1");

  const ModelConfig ok = ModelConfig::from_hf_text(fixture_config("llama_odd").dump(), "config.json");
  auto invalid = [](const ModelConfig& c) {
    try {
      c.validate("gguf");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(invalid(ok), "");
  ModelConfig c = ok;
  c.norm_eps = std::numeric_limits<double>::infinity();
  EXPECT_NE(invalid(c).find("norm eps inf"), std::string::npos) << invalid(c);
  c = ok;
  c.rope.theta = std::numeric_limits<double>::quiet_NaN();
  EXPECT_NE(invalid(c).find("rope theta nan"), std::string::npos) << invalid(c);
  c = ok;
  c.rope.factor = std::numeric_limits<double>::infinity();  // llama_odd has llama3 scaling
  EXPECT_NE(invalid(c).find("rope scaling factor inf"), std::string::npos) << invalid(c);
  c = ok;
  c.final_logit_softcap = std::numeric_limits<double>::infinity();
  EXPECT_NE(invalid(c).find("final_logit_softcap inf"), std::string::npos) << invalid(c);
}

// Found by fuzzing: shard_plan computed a rank's bytes as nbytes * elements / numel, which
// overflows int64 for an f32 embedding of 128256 x 16384 (8.4e9 bytes x 2.1e9 elements).
// Found by fuzz_hf_config: a Mixtral config carrying Qwen2-MoE's mlp_only_layers read that layer
// as dense, so its export (Mixtral has no such key) read back as another model. Transformers'
// MixtralConfig ignores the key: every Mixtral layer is sparse; Qwen2-MoE keeps honouring it.
TEST(ModelConfig, MixtralIgnoresMlpOnlyLayers) {
  json j = fixture_config("mixtral_tiny");
  j["mlp_only_layers"] = json::array({1});
  j["decoder_sparse_step"] = 3;
  const ModelConfig m = ModelConfig::from_hf_text(j.dump(), "config.json");
  EXPECT_EQ(m.moe.layer_moe, std::vector<bool>(size_t(m.n_layers), true));
  json q = fixture_config("qwen2_moe_tiny");
  q["mlp_only_layers"] = json::array({1});
  q["decoder_sparse_step"] = 1;
  const ModelConfig qm = ModelConfig::from_hf_text(q.dump(), "config.json");
  ASSERT_GT(qm.n_layers, 1);
  EXPECT_FALSE(qm.moe.layer_moe[1]);
  EXPECT_TRUE(qm.moe.layer_moe[0]);
}

TEST(ShardPlan, ByteCountsOfLargeTensorsDoNotOverflow) {
  json j = fixture_config("llama_gqa");
  j["vocab_size"] = 128256;
  j["hidden_size"] = 16384;
  j["num_attention_heads"] = 128;
  j["num_key_value_heads"] = 8;
  j["head_dim"] = 128;
  j["intermediate_size"] = 53248;
  const ModelConfig c = ModelConfig::from_hf_text(j.dump(), "config.json");
  const int64_t numel = int64_t(128256) * 16384;
  const std::vector<TensorInfo> tensors = {
      {"model.embed_tokens.weight", {128256, 16384}, "F32", DType::kF32, 0, numel * 4, "model.safetensors"},
      {"model.layers.0.mlp.down_proj.weight", {16384, 53248}, "F32", DType::kF32, 0, int64_t(16384) * 53248 * 4,
       "model.safetensors"}};
  for (int tp = 1; tp <= 4; ++tp) {
    for (const TensorShardPlan& p : shard_plan(c, tensors, tp)) {
      int64_t sum = 0;
      for (size_t r = 0; r < p.bytes.size(); ++r) {
        EXPECT_GE(p.bytes[r], 0) << p.info.name << " tp " << tp;
        EXPECT_EQ(p.bytes[r], p.info.nbytes / p.info.shape[p.split == "cols" ? 1 : 0] * p.ranges[r].size())
            << p.info.name << " tp " << tp << " rank " << r;
        sum += p.bytes[r];
      }
      EXPECT_EQ(sum, p.info.nbytes) << p.info.name << " tp " << tp;
    }
  }
}

}  // namespace
}  // namespace tensorpar::testing

// ModelConfig from Hugging Face config.json (Llama family incl. Qwen2/Qwen3/Mistral/SmolLM2, the MoE
// models Mixtral, Qwen2-MoE and Qwen3-MoE, GPT-2, Gemma 3).
#include "model/model_config.h"

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/json_depth.h"

namespace tensorpar {

namespace {

using nlohmann::json;

int64_t need_int(const json& j, const char* key, const std::string& where) {
  TP_CHECK(j.contains(key) && j[key].is_number_integer(), "[ModelConfig] ", where, ": missing or non-integer '", key, "'");
  return j[key].get<int64_t>();
}

// A count that sizes per-layer (or per-head, per-expert) tables: read and range-checked before
// anything is sized by it.
int64_t need_count(const json& j, const char* key, const std::string& where) {
  const int64_t n = need_int(j, key, where);
  TP_CHECK(n >= 1 && n <= ModelConfig::kMaxCount, "[ModelConfig] ", where, ": '", key, "' is ", n,
           ", expected in [1, ", ModelConfig::kMaxCount, "]");
  return n;
}

// A value for an error message, shortened.
std::string shown(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// A string or boolean field: absent or null gives the fallback, another type is an error naming it
// (json::value would throw its own type_error instead).
std::string str_or(const json& j, const char* key, const std::string& fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  TP_CHECK(j[key].is_string(), "[ModelConfig] ", where, ": '", key, "' is ", shown(j[key]), ", expected a string");
  return j[key].get<std::string>();
}

bool bool_or(const json& j, const char* key, bool fallback, const std::string& where) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  TP_CHECK(j[key].is_boolean(), "[ModelConfig] ", where, ": '", key, "' is ", shown(j[key]), ", expected true or false");
  return j[key].get<bool>();
}

int64_t int_or(const json& j, const char* key, int64_t fallback) {
  return j.contains(key) && j[key].is_number_integer() ? j[key].get<int64_t>() : fallback;
}

double num_or(const json& j, const char* key, double fallback) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : fallback;
}

// eos_token_id may be an int or a list (Llama 3 instruct): take the first.
int64_t token_id_or(const json& j, const char* key) {
  if (!j.contains(key)) return -1;
  const json& v = j[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_array() && !v.empty() && v[0].is_number_integer()) return v[0].get<int64_t>();
  return -1;
}

void read_rope_scaling(const json& s, RopeConfig& rope, const std::string& where) {
  if (!s.is_object()) return;
  const std::string type = str_or(s, "rope_type", str_or(s, "type", "default", where), where);
  if (type == "default") return;
  rope.factor = num_or(s, "factor", 1.0);
  if (type == "linear") {
    rope.scaling = RopeScalingType::kLinear;
  } else if (type == "llama3") {
    rope.scaling = RopeScalingType::kLlama3;
    rope.low_freq_factor = num_or(s, "low_freq_factor", 1.0);
    rope.high_freq_factor = num_or(s, "high_freq_factor", 4.0);
    rope.original_max_position = int_or(s, "original_max_position_embeddings", 8192);
  } else {
    TP_CHECK(false, "[ModelConfig] ", where, ": unsupported rope scaling type '", type,
             "' (supported: default, linear, llama3)");
  }
}

// Gemma 3 (Gemma3ForCausalLM's "gemma3_text", or the multimodal "gemma3" with a text_config).
ModelConfig gemma3_from_hf_json(const json& outer, const std::string& where) {
  const json& j = outer.contains("text_config") && outer["text_config"].is_object() ? outer["text_config"] : outer;
  ModelConfig c;
  c.model_type = "gemma3";
  c.family = ArchFamily::kGemma3;
  c.vocab_size = need_int(j, "vocab_size", where);
  c.hidden = need_int(j, "hidden_size", where);
  c.n_layers = need_count(j, "num_hidden_layers", where);
  c.n_heads = need_count(j, "num_attention_heads", where);
  c.n_kv_heads = int_or(j, "num_key_value_heads", c.n_heads);
  c.head_dim = int_or(j, "head_dim", 256);
  c.ffn = need_int(j, "intermediate_size", where);
  c.max_position = int_or(j, "max_position_embeddings", 131072);
  c.norm_eps = num_or(j, "rms_norm_eps", 1e-6);
  c.tie_embeddings = bool_or(j, "tie_word_embeddings", true, where);
  c.qkv_bias = bool_or(j, "attention_bias", false, where);
  c.norm_weight_offset = 1.0f;
  c.qk_norm = true;
  const std::string act = str_or(j, "hidden_activation", "gelu_pytorch_tanh", where);
  TP_CHECK(act == "gelu_pytorch_tanh" || act == "gelu_tanh", "[ModelConfig] ", where,
           ": unsupported hidden_activation '", act, "' (supported: gelu_pytorch_tanh)");
  TP_CHECK(!bool_or(j, "use_bidirectional_attention", false, where), "[ModelConfig] ", where,
           ": use_bidirectional_attention is not supported (a causal LM only)");
  TP_CHECK(!j.contains("attn_logit_softcapping") || j["attn_logit_softcapping"].is_null(), "[ModelConfig] ", where,
           ": attn_logit_softcapping is not supported (Gemma 2)");
  c.query_scale = 1.0 / std::sqrt(num_or(j, "query_pre_attn_scalar", 256.0));
  c.final_logit_softcap = num_or(j, "final_logit_softcapping", 0.0);
  c.sliding_window = int_or(j, "sliding_window", 4096);
  // Which layers are local: layer_types, else every sliding_window_pattern-th layer is global.
  if (j.contains("layer_types") && j["layer_types"].is_array()) {
    TP_CHECK(int64_t(j["layer_types"].size()) == c.n_layers, "[ModelConfig] ", where, ": layer_types has ",
             j["layer_types"].size(), " entries for ", c.n_layers, " layers");
    for (const json& t : j["layer_types"]) {
      const std::string s = t.is_string() ? t.get<std::string>() : std::string();
      TP_CHECK(s == "sliding_attention" || s == "full_attention", "[ModelConfig] ", where, ": layer type '", s,
               "' (supported: sliding_attention, full_attention)");
      c.layer_sliding.push_back(s == "sliding_attention");
    }
  } else {
    const int64_t pattern = int_or(j, "sliding_window_pattern", 6);
    TP_CHECK(pattern >= 1, "[ModelConfig] ", where, ": sliding_window_pattern ", pattern, ", expected >= 1");
    for (int64_t l = 0; l < c.n_layers; ++l) c.layer_sliding.push_back((l + 1) % pattern != 0);
  }
  // RoPE: rope_parameters {full_attention, sliding_attention} (newer transformers), else
  // rope_theta / rope_scaling (global) and rope_local_base_freq (local).
  c.rope.theta = num_or(j, "rope_theta", 1000000.0);
  c.rope_local.theta = num_or(j, "rope_local_base_freq", 10000.0);
  if (j.contains("rope_scaling")) read_rope_scaling(j["rope_scaling"], c.rope, where);
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {
    const json& p = j["rope_parameters"];
    if (p.contains("full_attention") && p["full_attention"].is_object()) {
      c.rope.theta = num_or(p["full_attention"], "rope_theta", c.rope.theta);
      read_rope_scaling(p["full_attention"], c.rope, where);
    }
    if (p.contains("sliding_attention") && p["sliding_attention"].is_object()) {
      c.rope_local.theta = num_or(p["sliding_attention"], "rope_theta", c.rope_local.theta);
      read_rope_scaling(p["sliding_attention"], c.rope_local, where);
    }
  }
  c.bos_id = token_id_or(j, "bos_token_id");
  c.eos_id = token_id_or(j, "eos_token_id");
  return c;
}

// The MoE keys of Mixtral (num_local_experts; every layer sparse, top-k renormalised) and of
// Qwen2-MoE / Qwen3-MoE (num_experts, moe_intermediate_size, decoder_sparse_step, mlp_only_layers,
// norm_topk_prob; Qwen2-MoE's shared expert).
MoeConfig moe_from_hf_json(const json& j, const ModelConfig& c, const std::string& where) {
  MoeConfig m;
  const bool mixtral = c.model_type == "mixtral";
  m.n_experts = int_or(j, "num_experts", int_or(j, "num_local_experts", 0));
  TP_CHECK(m.n_experts >= 1 && m.n_experts <= ModelConfig::kMaxCount, "[ModelConfig] ", where, ": model_type '",
           c.model_type, "' needs num_experts (or num_local_experts) in [1, ", ModelConfig::kMaxCount, "], got ",
           m.n_experts);
  m.top_k = need_int(j, "num_experts_per_tok", where);
  TP_CHECK(m.top_k >= 1 && m.top_k <= m.n_experts, "[ModelConfig] ", where, ": num_experts_per_tok ", m.top_k,
           ", expected in [1, ", m.n_experts, "]");
  m.expert_ffn = mixtral ? c.ffn : need_int(j, "moe_intermediate_size", where);
  m.norm_topk = mixtral || bool_or(j, "norm_topk_prob", false, where);
  if (c.model_type == "qwen2_moe") m.shared_ffn = int_or(j, "shared_expert_intermediate_size", 0);
  m.aux_loss_coef = num_or(j, "router_aux_loss_coef", 0.0);
  const int64_t step = mixtral ? 1 : int_or(j, "decoder_sparse_step", 1);
  TP_CHECK(step >= 1, "[ModelConfig] ", where, ": decoder_sparse_step ", step, ", expected >= 1");
  std::vector<bool> dense(size_t(c.n_layers), false);
  // Mixtral has no dense layers: transformers' MixtralConfig has no mlp_only_layers and ignores one.
  if (!mixtral && j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array())
    for (const json& v : j["mlp_only_layers"]) {
      TP_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < c.n_layers, "[ModelConfig] ",
               where, ": mlp_only_layers entry ", v.dump(), " is not a layer index of [0, ", c.n_layers, ")");
      dense[size_t(v.get<int64_t>())] = true;
    }
  // As transformers: layer l is sparse when it is not in mlp_only_layers and (l + 1) % step == 0.
  for (int64_t l = 0; l < c.n_layers; ++l) m.layer_moe.push_back(!dense[size_t(l)] && (l + 1) % step == 0);
  return m;
}

}  // namespace

ModelConfig ModelConfig::from_hf_json(const json& j, const std::string& where) {
  TP_CHECK(j.is_object(), "[ModelConfig] ", where, ": config is not a JSON object");
  ModelConfig c;
  c.model_type = str_or(j, "model_type", "", where);
  if (c.model_type == "gemma3_text" || c.model_type == "gemma3") {
    c = gemma3_from_hf_json(j, where);
    c.validate(where);
    return c;
  }
  if (c.model_type == "gpt2") {
    c.family = ArchFamily::kGpt2;
    c.vocab_size = need_int(j, "vocab_size", where);
    c.hidden = need_int(j, "n_embd", where);
    c.n_layers = need_count(j, "n_layer", where);
    c.n_heads = need_count(j, "n_head", where);
    c.n_kv_heads = c.n_heads;
    c.head_dim = c.n_heads ? c.hidden / c.n_heads : 0;
    // n_inner defaults to 4 * n_embd (an n_embd out of bounds stays as it is for validate to name).
    c.ffn = j.contains("n_inner") && j["n_inner"].is_number_integer() ? j["n_inner"].get<int64_t>()
            : c.hidden > 0 && c.hidden <= ModelConfig::kMaxDim                ? 4 * c.hidden
                                                                               : c.hidden;
    c.max_position = int_or(j, "n_positions", 1024);
    c.norm_eps = num_or(j, "layer_norm_epsilon", 1e-5);
    c.tie_embeddings = bool_or(j, "tie_word_embeddings", true, where);
  } else {
    static const char* kLlamaLike[] = {"llama", "mistral", "qwen2", "smollm2", "qwen3", "mixtral", "qwen2_moe",
                                       "qwen3_moe", ""};
    bool known = false;
    for (const char* t : kLlamaLike) known |= c.model_type == t;
    TP_CHECK(known, "[ModelConfig] ", where, ": unsupported model_type '", c.model_type,
             "' (supported: llama, mistral, qwen2, qwen3, mixtral, qwen2_moe, qwen3_moe, gpt2, gemma3_text)");
    const std::string act = str_or(j, "hidden_act", "silu", where);
    TP_CHECK(act == "silu", "[ModelConfig] ", where, ": unsupported hidden_act '", act, "' (supported: silu)");
    c.family = ArchFamily::kLlama;
    c.vocab_size = need_int(j, "vocab_size", where);
    c.hidden = need_int(j, "hidden_size", where);
    c.n_layers = need_count(j, "num_hidden_layers", where);
    c.n_heads = need_count(j, "num_attention_heads", where);
    c.n_kv_heads = int_or(j, "num_key_value_heads", c.n_heads);
    c.head_dim = j.contains("head_dim") && j["head_dim"].is_number_integer() ? j["head_dim"].get<int64_t>()
                                                                               : (c.n_heads ? c.hidden / c.n_heads : 0);
    c.ffn = need_int(j, "intermediate_size", where);
    c.max_position = int_or(j, "max_position_embeddings", 2048);
    c.norm_eps = num_or(j, "rms_norm_eps", 1e-6);
    c.tie_embeddings = bool_or(j, "tie_word_embeddings", false, where);
    c.qkv_bias = c.model_type == "qwen2" || c.model_type == "qwen2_moe" || bool_or(j, "attention_bias", false, where);
    c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe";
    if (c.model_type == "mixtral" || c.model_type == "qwen2_moe" || c.model_type == "qwen3_moe")
      c.moe = moe_from_hf_json(j, c, where);
    c.rope.theta = num_or(j, "rope_theta", 10000.0);
    if (j.contains("rope_scaling")) read_rope_scaling(j["rope_scaling"], c.rope, where);
    if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) {  // newer transformers
      const json& p = j["rope_parameters"];
      c.rope.theta = num_or(p, "rope_theta", c.rope.theta);
      read_rope_scaling(p, c.rope, where);
    }
  }
  c.bos_id = token_id_or(j, "bos_token_id");
  c.eos_id = token_id_or(j, "eos_token_id");
  c.validate(where);
  return c;
}

ModelConfig ModelConfig::from_hf_text(std::string_view text, const std::string& where) {
  json j;
  try {
    j = json::parse(text, json_depth_limit("[ModelConfig] " + where));
  } catch (const json::exception& e) {
    TP_CHECK(false, "[ModelConfig] ", where, ": invalid JSON: ", e.what());
  }
  return from_hf_json(j, where);
}

ModelConfig ModelConfig::from_hf_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TP_CHECK(f.good(), "[ModelConfig] cannot open ", path);
  std::ostringstream text;
  text << f.rdbuf();
  return from_hf_text(text.str(), path);
}

void ModelConfig::validate(const std::string& where) const {
  TP_CHECK(vocab_size > 0 && hidden > 0 && n_layers > 0 && n_heads > 0 && n_kv_heads > 0 && head_dim > 0 && ffn > 0,
           "[ModelConfig] ", where, ": sizes must be positive: ", summary());
  TP_CHECK(n_layers <= kMaxCount && n_heads <= kMaxCount && n_kv_heads <= kMaxCount && vocab_size <= kMaxDim &&
               hidden <= kMaxDim && head_dim <= kMaxDim && ffn <= kMaxDim && max_position >= 0 &&
               max_position <= kMaxDim,
           "[ModelConfig] ", where, ": sizes out of bounds: ", summary(), " max_position=", max_position,
           " (layers and heads at most ", kMaxCount, ", other sizes at most ", kMaxDim, ", max_position >= 0)");
  TP_CHECK(std::isfinite(norm_eps) && norm_eps > 0, "[ModelConfig] ", where, ": norm eps ", norm_eps,
           ", expected a finite number > 0");
  if (family != ArchFamily::kGpt2) {
    for (const RopeConfig* r : {&rope, &rope_local}) {
      if (r == &rope_local && layer_sliding.empty()) continue;
      TP_CHECK(std::isfinite(r->theta) && r->theta > 1, "[ModelConfig] ", where, ": rope theta ", r->theta,
               ", expected a finite number > 1");
      TP_CHECK(r->scaling == RopeScalingType::kNone ||
                   (std::isfinite(r->factor) && std::isfinite(r->low_freq_factor) &&
                    std::isfinite(r->high_freq_factor)),
               "[ModelConfig] ", where, ": rope scaling factor ", r->factor, ", low_freq_factor ",
               r->low_freq_factor, ", high_freq_factor ", r->high_freq_factor, ": expected finite numbers");
    }
  }
  TP_CHECK(n_heads % n_kv_heads == 0, "[ModelConfig] ", where, ": ", n_heads,
           " attention heads is not a multiple of ", n_kv_heads, " kv heads");
  TP_CHECK(head_dim % 2 == 0, "[ModelConfig] ", where, ": head_dim ", head_dim, " must be even for RoPE");
  TP_CHECK(family != ArchFamily::kGpt2 || n_heads * head_dim == hidden, "[ModelConfig] ", where,
           ": gpt2 needs n_embd divisible by n_head");
  TP_CHECK(layer_sliding.empty() || int64_t(layer_sliding.size()) == n_layers, "[ModelConfig] ", where, ": ",
           layer_sliding.size(), " layer types for ", n_layers, " layers");
  TP_CHECK(sliding_window >= 0 && final_logit_softcap >= 0 && query_scale >= 0 && std::isfinite(final_logit_softcap) &&
               std::isfinite(query_scale),
           "[ModelConfig] ", where,
           ": sliding_window ", sliding_window, ", final_logit_softcap ", final_logit_softcap, ", query_scale ",
           query_scale, ": expected >= 0");
  if (moe.n_experts > 0) {
    TP_CHECK(moe.n_experts <= kMaxCount && moe.top_k >= 1 && moe.top_k <= moe.n_experts && moe.expert_ffn > 0 &&
                 moe.expert_ffn <= kMaxDim && moe.shared_ffn >= 0 && moe.shared_ffn <= kMaxDim &&
                 std::isfinite(moe.aux_loss_coef) && int64_t(moe.layer_moe.size()) == n_layers,
             "[ModelConfig] ", where, ": inconsistent experts: E=", moe.n_experts, " top_k=", moe.top_k,
             " expert_ffn=", moe.expert_ffn, " shared_ffn=", moe.shared_ffn, " aux_loss_coef=", moe.aux_loss_coef,
             ", ", moe.layer_moe.size(),
             " layer flags for ", n_layers, " layers");
  }
}

std::string ModelConfig::summary() const {
  std::ostringstream os;
  os << model_type << ": L=" << n_layers << " C=" << hidden << " NH=" << n_heads << " NKV=" << n_kv_heads
     << " HS=" << head_dim << " F=" << ffn << " V=" << vocab_size << " tied=" << (tie_embeddings ? 1 : 0);
  if (family != ArchFamily::kGpt2) os << " rope_theta=" << rope.theta;
  if (moe.n_experts > 0) {
    int64_t sparse = 0;
    for (bool b : moe.layer_moe) sparse += b;
    os << " experts=" << moe.n_experts << " top_k=" << moe.top_k << " expert_F=" << moe.expert_ffn
       << " moe_layers=" << sparse;
    if (moe.shared_ffn > 0) os << " shared_F=" << moe.shared_ffn;
  }
  if (family == ArchFamily::kGemma3) os << " local_rope_theta=" << rope_local.theta << " window=" << sliding_window;
  return os.str();
}

}  // namespace tensorpar

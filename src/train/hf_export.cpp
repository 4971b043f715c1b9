// HF config writing, the model config in a checkpoint's state, and checkpoint -> HF directory
// export (with llama.cpp's q/k row order undone for GGUF llama runs).
#include "train/hf_export.h"

#include <filesystem>

#include "core/error.h"
#include "io/atomic_file.h"
#include "io/safetensors_writer.h"
#include "model/tokenizer_loader.h"
#include "tokenizer/tokenizer_json_writer.h"
#include "io/sharded_checkpoint.h"

namespace tensorpar {
namespace fs = std::filesystem;

namespace {

nlohmann::json token_id(int64_t id) {
  return id < 0 ? nlohmann::json(nullptr) : nlohmann::json(id);
}

// (rows, cols) -> (cols, rows)
Tensor transposed(const Tensor& t) {
  return t.transpose(0, 1).contiguous();
}

constexpr const char* kConfigKey = "config";
constexpr const char* kInterleavedConfigKey = "config_interleaved_rope";
constexpr const char* kLayoutKey = "tensorpar_rope_layout";
// Gemma 3 norm weights as the run holds them: 1 = HF's (w, applied as 1 + w), 0 = llama.cpp's
// (1 + w stored, a GGUF run). HF files always hold w; export converts.
constexpr const char* kNormOffsetKey = "tensorpar_norm_weight_offset";

// The keys the Llama-like decoders (Llama, Qwen, Mixtral, Gemma 3) name alike.
nlohmann::json decoder_keys(const ModelConfig& c) {
  return {{"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden},
          {"num_hidden_layers", c.n_layers},
          {"num_attention_heads", c.n_heads},
          {"num_key_value_heads", c.n_kv_heads},
          {"head_dim", c.head_dim},
          {"intermediate_size", c.ffn},
          {"max_position_embeddings", c.max_position},
          {"rms_norm_eps", c.norm_eps},
          {"tie_word_embeddings", c.tie_embeddings},
          {"attention_bias", c.qkv_bias}};
}

// Gemma3ForCausalLM's config.json ("gemma3_text"), with every key model_config.cpp reads back.
nlohmann::json gemma3_config_json(const ModelConfig& c) {
  nlohmann::json layer_types = nlohmann::json::array();
  for (int64_t l = 0; l < c.n_layers; ++l) layer_types.push_back(c.is_sliding(l) ? "sliding_attention" : "full_attention");
  auto rope = [](const RopeConfig& r) {
    nlohmann::json j = {{"rope_type", "default"}, {"rope_theta", r.theta}};
    if (r.scaling == RopeScalingType::kLinear) j["rope_type"] = "linear", j["factor"] = r.factor;
    TP_CHECK(r.scaling != RopeScalingType::kLlama3, "[hf_config_json] Gemma 3 with llama3 RoPE scaling");
    return j;
  };
  const double scalar = c.query_scale > 0 ? 1.0 / (c.query_scale * c.query_scale) : double(c.head_dim);
  nlohmann::json j = decoder_keys(c);
  j.update({{"architectures", {"Gemma3ForCausalLM"}},
            {"model_type", "gemma3_text"},
            {"hidden_activation", "gelu_pytorch_tanh"},
            {"query_pre_attn_scalar", scalar},
            {"final_logit_softcapping", c.final_logit_softcap > 0 ? nlohmann::json(c.final_logit_softcap) : nullptr},
            {"attn_logit_softcapping", nullptr},
            {"sliding_window", c.sliding_window},
            {"layer_types", layer_types},
            {"rope_parameters", {{"full_attention", rope(c.rope)}, {"sliding_attention", rope(c.rope_local)}}}});
  return j;
}

// "model.layers.N.self_attn.{q,k}_proj.{weight,bias}": rows in llama.cpp's order in a GGUF llama run.
bool is_qk_projection(const std::string& name) {
  return name.find(".self_attn.q_proj.") != std::string::npos ||
         name.find(".self_attn.k_proj.") != std::string::npos;
}

}  // namespace

nlohmann::json hf_config_json(const ModelConfig& c) {
  nlohmann::json j;
  if (c.family == ArchFamily::kGemma3) {
    j = gemma3_config_json(c);
  } else if (c.family == ArchFamily::kGpt2) {
    j = {{"architectures", {"GPT2LMHeadModel"}},
         {"model_type", "gpt2"},
         {"vocab_size", c.vocab_size},
         {"n_embd", c.hidden},
         {"n_layer", c.n_layers},
         {"n_head", c.n_heads},
         {"n_inner", c.ffn},
         {"n_positions", c.max_position},
         {"n_ctx", c.max_position},
         {"activation_function", "gelu_new"},
         {"layer_norm_epsilon", c.norm_eps},
         {"scale_attn_weights", true},
         {"tie_word_embeddings", c.tie_embeddings}};
  } else {
    TP_CHECK(c.rope.layout == RopeLayout::kHalfSplit,
             "[hf_config_json] this model uses interleaved RoPE (its weights "
             "came from a GGUF llama file); it has no HF config.json form");
    const std::string type =
        c.model_type.empty() || c.model_type == "smollm2" ? "llama" : c.model_type;
    j = decoder_keys(c);
    j.update({{"architectures",
               {type == "qwen2"       ? "Qwen2ForCausalLM"
                : type == "mistral"   ? "MistralForCausalLM"
                : type == "qwen3"     ? "Qwen3ForCausalLM"
                : type == "mixtral"   ? "MixtralForCausalLM"
                : type == "qwen2_moe" ? "Qwen2MoeForCausalLM"
                : type == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                                      : "LlamaForCausalLM"}},
              {"model_type", type},
              {"hidden_act", "silu"},
              {"mlp_bias", false},
              {"rope_theta", c.rope.theta}});
    if (c.rope.scaling == RopeScalingType::kNone) {
      j["rope_scaling"] = nullptr;
    } else if (c.rope.scaling == RopeScalingType::kLinear) {
      j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", c.rope.factor}};
    } else {
      j["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", c.rope.factor},
                           {"low_freq_factor", c.rope.low_freq_factor},
                           {"high_freq_factor", c.rope.high_freq_factor},
                           {"original_max_position_embeddings", c.rope.original_max_position}};
    }
    if (c.moe.n_experts > 0) {  // the keys model_config.cpp reads back
      const MoeConfig& m = c.moe;
      j[type == "mixtral" ? "num_local_experts" : "num_experts"] = m.n_experts;
      j["num_experts_per_tok"] = m.top_k;
      j["router_aux_loss_coef"] = m.aux_loss_coef;
      if (type != "mixtral") {
        std::vector<int64_t> dense;
        for (int64_t l = 0; l < c.n_layers; ++l)
          if (!c.is_moe(l)) dense.push_back(l);
        j["moe_intermediate_size"] = m.expert_ffn;
        j["norm_topk_prob"] = m.norm_topk;
        j["decoder_sparse_step"] = 1;
        j["mlp_only_layers"] = dense;
        if (m.shared_ffn > 0) j["shared_expert_intermediate_size"] = m.shared_ffn;
      }
    }
  }
  j["bos_token_id"] = token_id(c.bos_id);
  j["eos_token_id"] = token_id(c.eos_id);
  j["torch_dtype"] = "float32";
  return j;
}

void store_model_config(nlohmann::json& state, const ModelConfig& c) {
  if (c.rope.layout == RopeLayout::kHalfSplit) {
    state[kConfigKey] = hf_config_json(c);
    if (c.family == ArchFamily::kGemma3) state[kConfigKey][kNormOffsetKey] = c.norm_weight_offset;
    return;
  }
  ModelConfig half = c;
  half.rope.layout = RopeLayout::kHalfSplit;
  nlohmann::json j = hf_config_json(half);
  j[kLayoutKey] = "interleaved";
  state[kInterleavedConfigKey] = j;
}

ModelConfig stored_model_config(const nlohmann::json& state, const std::string& where) {
  const bool half = state.contains(kConfigKey), inter = state.contains(kInterleavedConfigKey);
  TP_CHECK(half || inter, "[stored_model_config] checkpoint ", where,
           " has no model config in its state (no \"", kConfigKey, "\" or \"",
           kInterleavedConfigKey, "\" key; a GGUF llama run saved before configs were stored "
           "for every run has none): cannot tell the model's architecture");
  const nlohmann::json& j = state[half ? kConfigKey : kInterleavedConfigKey];
  ModelConfig c = ModelConfig::from_hf_json(j, where);
  const nlohmann::json layout_j = j.value(kLayoutKey, nlohmann::json(half ? "half_split" : "(missing)"));
  const std::string layout = layout_j.is_string() ? layout_j.get<std::string>() : layout_j.dump();
  TP_CHECK(layout == "half_split" || layout == "interleaved", "[stored_model_config] checkpoint ",
           where, ": ", kLayoutKey, " '", layout, "', expected 'half_split' or 'interleaved'");
  c.rope.layout = layout == "interleaved" ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  if (c.family == ArchFamily::kGemma3 && j.contains(kNormOffsetKey)) {
    const nlohmann::json& offset = j[kNormOffsetKey];
    TP_CHECK(offset.is_number() && (offset == 0 || offset == 1), "[stored_model_config] checkpoint ",
             where, ": ", kNormOffsetKey, " ", offset.dump(), ", expected 0 or 1");
    c.norm_weight_offset = offset.get<float>();
  } else if (c.family == ArchFamily::kGemma3) {
    c.norm_weight_offset = 1.0f;
  }
  return c;
}

Tensor gguf_qk_rows_to_hf(const Tensor& t, int64_t head_dim) {
  TP_CHECK(t.ndim() >= 1 && head_dim > 0 && head_dim % 2 == 0 && t.dim(0) % head_dim == 0,
           "[gguf_qk_rows_to_hf] rows: got ", t.describe(), " with head size ", head_dim,
           ", expected a multiple of an even head size");
  const Tensor src = t.contiguous();
  Tensor out = Tensor::empty(t.shape(), t.dtype());
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < t.dim(0) / head_dim; ++h)
    for (int64_t i = 0; i < half; ++i)
      for (int64_t j = 0; j < 2; ++j) {
        const int64_t hf = h * head_dim + j * half + i, gguf = h * head_dim + 2 * i + j;
        out.slice(0, hf, hf + 1).copy_from(src.slice(0, gguf, gguf + 1));
      }
  return out;
}

int64_t export_hf(const std::string& checkpoint, const std::string& out_dir, DType dtype) {
  TP_CHECK(dtype == DType::kF32 || dtype == DType::kBF16 || dtype == DType::kF16,
           "[export_hf] dtype ", dtype_name(dtype), ": expected f32, bf16 or f16");
  ShardedCheckpointReader r(checkpoint);
  const std::string where = r.dir() + "/index.json";
  const ModelConfig c = stored_model_config(r.state(), where);
  const bool gguf_rows = c.rope.layout == RopeLayout::kInterleaved;
  TP_CHECK(!gguf_rows || c.family == ArchFamily::kLlama, "[export_hf] ", where,
           ": interleaved RoPE on a non-llama model");
  ModelConfig hf = c;
  hf.rope.layout = RopeLayout::kHalfSplit;  // what the rows are once gguf_qk_rows_to_hf has run
  nlohmann::json config = hf_config_json(hf);
  config["torch_dtype"] = dtype == DType::kF32 ? "float32" : dtype == DType::kBF16 ? "bfloat16" : "float16";
  const std::string prefix = "param/";
  std::vector<NamedTensor> out;
  std::map<std::string, Tensor> gpt2_qkv;  // "<layer prefix>|w" / "|b" -> pieces gathered below
  for (const std::string& stored : r.names()) {
    if (stored.rfind(prefix, 0) != 0) continue;
    const std::string name = stored.substr(prefix.size());
    Tensor t = r.read_full(stored);
    if (gguf_rows && is_qk_projection(name)) t = gguf_qk_rows_to_hf(t, c.head_dim);
    // A GGUF Gemma run holds its norm weights as 1 + w; HF files hold w.
    if (c.family == ArchFamily::kGemma3 && c.norm_weight_offset == 0.0f && name.ends_with("norm.weight")) {
      float* v = t.data<float>();
      for (int64_t i = 0; i < t.numel(); ++i) v[i] -= 1.0f;
    }
    if (c.family == ArchFamily::kGpt2) {
      const auto qkv = name.find(".attn.c_attn.");
      if (qkv != std::string::npos) continue;  // assembled per layer below
      const bool conv1d =
          name.find(".weight") != std::string::npos &&
          (name.find(".c_proj.") != std::string::npos || name.find(".c_fc.") != std::string::npos);
      if (conv1d) t = transposed(t);
    }
    out.push_back({name, t});
  }
  if (c.family == ArchFamily::kGpt2) {
    const int64_t C = c.hidden;
    for (int64_t l = 0; l < c.n_layers; ++l) {
      const std::string p = "transformer.h." + std::to_string(l) + ".attn.c_attn.";
      Tensor w = Tensor::empty({C, 3 * C}, DType::kF32), b = Tensor::empty({3 * C}, DType::kF32);
      for (int k = 0; k < 3; ++k) {
        const std::string part(1, "qkv"[k]);
        w.slice(1, k * C, (k + 1) * C)
            .copy_from(transposed(r.read_full(prefix + p + part + ".weight")));
        b.slice(0, k * C, (k + 1) * C).copy_from(r.read_full(prefix + p + part + ".bias"));
      }
      out.push_back({p + "weight", w});
      out.push_back({p + "bias", b});
    }
  }
  // The checkpoint's masters are f32; a 16-bit export rounds each value once (to nearest even).
  if (dtype != DType::kF32)
    for (NamedTensor& t : out) t.tensor = t.tensor.to(dtype);
  fs::create_directories(out_dir);
  save_safetensors(out_dir + "/model.safetensors", out, {{"format", "pt"}});
  const std::string text = config.dump(2) + "\n";
  write_file_atomic(out_dir + "/config.json", std::as_bytes(std::span(text.data(), text.size())));
  return int64_t(out.size());
}

std::string export_tokenizer(const std::string& source, const std::string& out_dir) {
  if (source.empty()) return "";
  const fs::path out(out_dir);
  if (fs::is_directory(source)) {
    std::string copied;
    for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"})
      if (fs::exists(fs::path(source) / f)) {
        fs::copy_file(fs::path(source) / f, out / f, fs::copy_options::overwrite_existing);
        copied += std::string(copied.empty() ? "" : ", ") + f;
      }
    TP_CHECK(!copied.empty(), "[export] tokenizer directory ", source, " has no tokenizer.json");
    return "tokenizer copied from " + source + " (" + copied + ")";
  }
  if (!fs::is_regular_file(source))
    return "no tokenizer written: the run's tokenizer " + source +
           " no longer exists (generate from the export with --tokenizer FILE)";
  if (is_gguf_file(source)) {
    write_hf_tokenizer_files(read_gguf_vocab(source), out, gguf_chat_template(source));
    return "tokenizer of " + source + " written as tokenizer.json + tokenizer_config.json";
  }
  TP_CHECK(source.size() > 5 && source.compare(source.size() - 5, 5, ".json") == 0,
           "[export] the run's tokenizer ", source, " is neither a tokenizer.json, a GGUF nor a directory");
  try {
    load_tokenizer(source);  // a JSON file that is no tokenizer is not copied as one
  } catch (const Error& e) {
    throw Error("[export] the run's tokenizer " + source + " is not a tokenizer.json: " + e.what());
  }
  fs::copy_file(source, out / "tokenizer.json", fs::copy_options::overwrite_existing);
  return "tokenizer.json copied from " + source;
}

}  // namespace tensorpar

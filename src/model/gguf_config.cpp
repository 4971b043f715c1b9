// ModelConfig from GGUF metadata (llama.cpp's llama-arch keys "<arch>.embedding_length" etc.).
// Llama-arch files hold Q/K rows permuted by llama.cpp's converter, so they get interleaved RoPE
// (pairs (2i, 2i+1)) instead of un-permuting rows at load; qwen2/qwen3 files are not permuted.
// Mixture-of-experts files: llama-arch with <arch>.expert_count (Mixtral), qwen2moe and qwen3moe,
// their experts stacked into 3-D tensors (arch_llama.cpp reads them).
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "io/gguf_metadata.h"
#include "model/model_config.h"

namespace tensorpar {

ModelConfig ModelConfig::from_gguf(const GgufMetadata& meta, const std::vector<std::string>& tensor_names,
                                   const std::string& where) {
  const std::string arch = meta.get_string("general.architecture");
  TP_CHECK(arch == "llama" || arch == "qwen2" || arch == "mistral" || arch == "gemma3" || arch == "qwen3" ||
               arch == "qwen2moe" || arch == "qwen3moe",
           "[ModelConfig::from_gguf] ", where, ": unsupported general.architecture '", arch,
           "' (supported: llama, qwen2, qwen3, mistral, gemma3, qwen2moe, qwen3moe)");
  auto has_tensor = [&](const std::string& n) {
    return std::find(tensor_names.begin(), tensor_names.end(), n) != tensor_names.end();
  };
  auto key = [&](const char* k) { return arch + "." + k; };
  ModelConfig c;
  // The HF model type of each GGUF architecture (names and conventions in arch_llama.cpp).
  const int64_t experts = meta.has(key("expert_count")) ? meta.get_i64(key("expert_count")) : 0;
  c.model_type = arch == "qwen2moe" ? "qwen2_moe" : arch == "qwen3moe" ? "qwen3_moe"
                 : arch == "llama" && experts > 0 ? "mixtral" : arch;
  c.family = ArchFamily::kLlama;
  c.hidden = meta.get_i64(key("embedding_length"));
  c.n_layers = meta.get_i64(key("block_count"));
  c.ffn = meta.get_i64(key("feed_forward_length"));
  c.n_heads = meta.get_i64(key("attention.head_count"));
  c.n_kv_heads = meta.has(key("attention.head_count_kv")) ? meta.get_i64(key("attention.head_count_kv")) : c.n_heads;
  c.head_dim = meta.has(key("attention.key_length")) ? meta.get_i64(key("attention.key_length"))
                                                      : (c.n_heads ? c.hidden / c.n_heads : 0);
  c.max_position = meta.has(key("context_length")) ? meta.get_i64(key("context_length")) : 2048;
  c.norm_eps = meta.has(key("attention.layer_norm_rms_epsilon")) ? meta.get_f64(key("attention.layer_norm_rms_epsilon"))
                                                                  : 1e-5;
  if (meta.has(key("vocab_size"))) {
    c.vocab_size = meta.get_i64(key("vocab_size"));
  } else {
    TP_CHECK(meta.has("tokenizer.ggml.tokens"), "[ModelConfig::from_gguf] ", where, ": no ", key("vocab_size"),
             " and no tokenizer.ggml.tokens to count the vocabulary");
    c.vocab_size = int64_t(meta.get_string_array("tokenizer.ggml.tokens").size());
  }
  c.tie_embeddings = !has_tensor("output.weight");
  c.qkv_bias = has_tensor("blk.0.attn_q.bias");
  c.rope.theta = meta.has(key("rope.freq_base")) ? meta.get_f64(key("rope.freq_base")) : 10000.0;
  c.rope.layout = arch == "llama" || arch == "mistral" ? RopeLayout::kInterleaved : RopeLayout::kHalfSplit;
  c.qk_norm = arch == "qwen3" || arch == "qwen3moe";
  if (experts > 0) {
    // llama.cpp's graphs: softmax then top-k; the k weights renormalised for Mixtral and Qwen3-MoE,
    // not for Qwen2-MoE (its shared expert sigmoid-gated); every layer sparse.
    TP_CHECK(meta.has(key("expert_used_count")), "[ModelConfig::from_gguf] ", where, ": ", key("expert_count"),
             " without ", key("expert_used_count"));
    c.moe.n_experts = experts;
    c.moe.top_k = meta.get_i64(key("expert_used_count"));
    c.moe.expert_ffn = meta.has(key("expert_feed_forward_length")) ? meta.get_i64(key("expert_feed_forward_length"))
                                                                    : c.ffn;
    c.moe.norm_topk = arch != "qwen2moe";
    if (arch == "qwen2moe")
      c.moe.shared_ffn = meta.has(key("expert_shared_feed_forward_length"))
                             ? meta.get_i64(key("expert_shared_feed_forward_length"))
                             : c.ffn;
    c.moe.layer_moe.assign(size_t(c.n_layers), true);
  }
  const std::string scaling = meta.get_string_or(key("rope.scaling.type"), "none");
  if (scaling == "linear") {
    c.rope.scaling = RopeScalingType::kLinear;
    c.rope.factor = meta.get_f64(key("rope.scaling.factor"));
  } else {
    TP_CHECK(scaling == "none", "[ModelConfig::from_gguf] ", where, ": unsupported ", key("rope.scaling.type"),
             " '", scaling, "' (supported: none, linear)");
  }
  if (meta.has(key("rope.dimension_count")))
    TP_CHECK(meta.get_i64(key("rope.dimension_count")) == c.head_dim, "[ModelConfig::from_gguf] ", where,
             ": partial rotary (", key("rope.dimension_count"), " ", meta.get_i64(key("rope.dimension_count")),
             " < head size ", c.head_dim, ") is not supported");
  if (arch == "gemma3") {
    // llama.cpp's gemma3 graph: every 6th layer global, local layers with RoPE base 10000, queries
    // scaled by 1/sqrt(HS), norm weights stored with Gemma's +1 already added by the converter.
    c.family = ArchFamily::kGemma3;
    c.sliding_window = meta.has(key("attention.sliding_window")) ? meta.get_i64(key("attention.sliding_window")) : 0;
    for (int64_t l = 0; l < c.n_layers; ++l) c.layer_sliding.push_back(c.sliding_window > 0 && (l + 1) % 6 != 0);
    c.rope_local = c.rope;
    c.rope_local.theta = 10000.0;
    c.rope_local.scaling = RopeScalingType::kNone;
    // (llama.cpp scales Gemma 3 27B, the 62-layer model, by 1/sqrt(C / NH) instead.)
    c.query_scale = 1.0 / std::sqrt(double(c.n_layers == 62 ? c.hidden / c.n_heads : c.head_dim));
    c.final_logit_softcap = meta.has(key("final_logit_softcapping")) ? meta.get_f64(key("final_logit_softcapping")) : 0.0;
    c.norm_weight_offset = 0.0f;
    c.qk_norm = true;
    c.norm_eps = meta.has(key("attention.layer_norm_rms_epsilon")) ? c.norm_eps : 1e-6;
  }
  c.bos_id = meta.has("tokenizer.ggml.bos_token_id") ? meta.get_i64("tokenizer.ggml.bos_token_id") : -1;
  c.eos_id = meta.has("tokenizer.ggml.eos_token_id") ? meta.get_i64("tokenizer.ggml.eos_token_id") : -1;
  c.validate(where);
  return c;
}

}  // namespace tensorpar

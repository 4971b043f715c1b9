// ModelConfig: the architecture hyper-parameters every other part reads, from a Hugging Face
// config.json or from GGUF metadata (the GGUF path lives with the GGUF loader). Names follow
// docs/shapes.md: C hidden, NH heads, NKV kv heads, HS head size, F ffn, L layers, V vocab.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kernels/cpu/rope.h"  // RopeLayout, RopeScalingType (shared with the kernel)

namespace tensorpar {

// kLlama covers Llama 2/3, Mistral, Qwen2, SmolLM2, Qwen3 (q/k norms) and the mixture-of-experts
// Mixtral, Qwen2-MoE and Qwen3-MoE (MoeConfig). kGemma3: q/k norms, four norms per layer,
// GeGLU, embeddings scaled by sqrt(C), sliding-window local layers beside global ones.
enum class ArchFamily : uint8_t { kLlama, kGpt2, kGemma3 };
class GgufMetadata;

struct RopeConfig {
  double theta = 10000.0;
  RopeLayout layout = RopeLayout::kHalfSplit;  // HF (i, i+HS/2); GGUF llama files: interleaved
  RopeScalingType scaling = RopeScalingType::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position = 8192;
};

// Mixture of experts: a layer's MLP is E SwiGLU experts of size expert_ffn, each token sent to
// the top_k of a softmax router; Qwen2-MoE adds a shared expert gated by sigmoid(x . w).
struct MoeConfig {
  int64_t n_experts = 0;        // E; 0: a dense model
  int64_t top_k = 0;            // experts per token
  int64_t expert_ffn = 0;       // each expert's intermediate size
  bool norm_topk = false;       // the top-k probabilities renormalised to sum to 1 (Mixtral: always)
  int64_t shared_ffn = 0;       // the shared expert's intermediate size; 0: none
  std::vector<bool> layer_moe;  // (L) true: an MoE layer; false: a dense MLP of size ffn
  double aux_loss_coef = 0;     // the config's router_aux_loss_coef (training may override)
};

struct ModelConfig {
  std::string model_type;  // as the source names it: "llama", "qwen2", "mistral", "gpt2", ...
  ArchFamily family = ArchFamily::kLlama;
  int64_t vocab_size = 0;   // V
  int64_t hidden = 0;       // C
  int64_t n_layers = 0;     // L
  int64_t n_heads = 0;      // NH
  int64_t n_kv_heads = 0;   // NKV
  int64_t head_dim = 0;     // HS
  int64_t ffn = 0;          // F
  int64_t max_position = 0;
  double norm_eps = 1e-5;
  bool tie_embeddings = false;
  bool qkv_bias = false;    // Qwen2: biases on q, k and v projections
  bool qk_norm = false;     // Qwen3, Gemma 3: RMSNorm over each head of q and k before RoPE
  RopeConfig rope;
  MoeConfig moe;
  int64_t bos_id = -1, eos_id = -1;
  // Gemma 3. A layer is local (sliding window, rope_local) or global (full attention, rope).
  int64_t sliding_window = 0;          // keys at distance < this from the query; 0: none
  std::vector<bool> layer_sliding;     // (L) true: local layer; empty: every layer global
  RopeConfig rope_local;               // RoPE of the local layers
  double query_scale = 0;              // attention score scale; 0: 1/sqrt(HS)
  double final_logit_softcap = 0;      // logits = cap * tanh(logits / cap); 0: none
  // RMSNorm multiplies by (offset + weight): HF Gemma checkpoints store weight - 1 (offset 1);
  // llama.cpp's converter stores the sum (offset 0).
  float norm_weight_offset = 0;

  // The bounds validate() enforces, far above any real model, so that no size derived from a
  // config (heads x head size, vocab x hidden, an expert's ffn x hidden, ...) overflows int64:
  // layers, heads, kv heads and experts up to kMaxCount, every other size up to kMaxDim.
  static constexpr int64_t kMaxCount = int64_t(1) << 16;
  static constexpr int64_t kMaxDim = (int64_t(1) << 31) - 1;

  bool is_sliding(int64_t layer) const { return !layer_sliding.empty() && layer_sliding[size_t(layer)]; }
  bool is_moe(int64_t layer) const { return !moe.layer_moe.empty() && moe.layer_moe[size_t(layer)]; }

  // Parses a HF config.json object; `where` names the file in errors. Reads both the older
  // rope_theta + rope_scaling and the newer rope_parameters forms.
  static ModelConfig from_hf_json(const nlohmann::json& j, const std::string& where);
  // The same from config.json's text (Error naming `where` for malformed JSON), and from the file.
  static ModelConfig from_hf_text(std::string_view text, const std::string& where);
  static ModelConfig from_hf_file(const std::string& path);
  // From GGUF metadata (general.architecture "llama", "qwen2" or "gpt2" and its <arch>.* keys);
  // llama-arch files get interleaved RoPE (their Q/K rows are permuted by the converter).
  // `tensor_names` lets it detect tied embeddings (no output.weight) and qkv biases.
  static ModelConfig from_gguf(const GgufMetadata& meta, const std::vector<std::string>& tensor_names,
                               const std::string& where);
  // Throws naming `where` if sizes are out of bounds or inconsistent (e.g. NH not a multiple of
  // NKV), or a floating-point setting is not finite or out of its range (norm eps > 0, RoPE
  // theta > 1).
  void validate(const std::string& where) const;
  std::string summary() const;  // one line, for inspect and logs
};

}  // namespace tensorpar

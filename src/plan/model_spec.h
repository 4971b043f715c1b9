// ModelSpec: the shape of a transformer as the planner sees it (sizes only, no weights), with
// exact parameter counts and FLOPs per token. Letters as in docs/shapes.md.
#pragma once

#include <cstdint>
#include <string>

namespace tensorpar::plan {

enum class MlpMatrices : uint8_t { kGated, kPlain };  // SwiGLU (gate, up, down) | GELU (fc1, fc2)

struct ModelSpec {
  std::string name;
  int64_t layers = 0;    // L
  int64_t hidden = 0;    // C
  int64_t heads = 0;     // NH
  int64_t kv_heads = 0;  // NKV
  int64_t head_dim = 0;  // HS
  int64_t ffn = 0;       // F (per expert for MoE)
  int64_t vocab = 0;     // V
  int64_t experts = 0;   // E; 0 = dense
  int64_t experts_per_token = 0;
  int64_t positions = 0;  // learned position rows (GPT-2 style); 0 = RoPE
  MlpMatrices mlp = MlpMatrices::kGated;
  bool tied_embeddings = false;
  bool linear_biases = false;  // every linear has a bias (GPT-2 / Megatron GPT)
  bool qkv_bias = false;       // q, k, v biases only (Qwen2)
  bool dropout = false;        // trained with dropout (its masks are saved activations)
  int norm_vectors = 1;        // 1 RMSNorm weight, 2 LayerNorm weight + bias

  int64_t q_dim() const { return heads * head_dim; }
  int64_t kv_dim() const { return kv_heads * head_dim; }
  bool is_moe() const { return experts > 0; }
  // Throws naming `where` when a size is missing or inconsistent.
  void validate(const std::string& where) const;
};

// A GPT model as Megatron-LM builds it (LayerNorm, GELU MLP of 4C, biases, learned positions).
ModelSpec megatron_gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab, int64_t seq);

int64_t layer_parameters(const ModelSpec& m);      // one transformer layer, all experts
int64_t embedding_parameters(const ModelSpec& m);  // token (+ position) embedding
int64_t head_parameters(const ModelSpec& m);       // final norm + LM head (0 rows when tied)
int64_t total_parameters(const ModelSpec& m);
// Parameters a token touches (MoE: only its experts_per_token experts).
int64_t active_parameters(const ModelSpec& m);

// Forward FLOPs of one layer for b sequences of s tokens (whole layer, not per device): the
// linear layers (2 FLOPs per multiply-add) plus attention scores and context over the full s x s
// square, the convention of Narayanan et al. 2021 that published TFLOP/s figures use.
struct LayerFlops {
  double linear = 0;     // QKV, output projection, MLP (active experts), router
  double attention = 0;  // Q K^T and P V
};
LayerFlops layer_forward_flops(const ModelSpec& m, double b, double s);
double head_forward_flops(const ModelSpec& m, double b, double s);  // LM head GEMM

// Model FLOPs of one training iteration of B sequences of s tokens (forward + backward, no
// recomputation): 3 x forward.
double model_flops_per_iteration(const ModelSpec& m, double B, double s);

}  // namespace tensorpar::plan

// Parameter counts and FLOPs of a ModelSpec. Counts follow the tensors a checkpoint holds, so a
// test can compare them with a reference library's own count.
#include "plan/model_spec.h"

#include "core/error.h"

namespace tensorpar::plan {

void ModelSpec::validate(const std::string& where) const {
  TP_CHECK(
      layers > 0 && hidden > 0 && heads > 0 && kv_heads > 0 && head_dim > 0 && ffn > 0 && vocab > 0,
      "[", where, "] model sizes must be positive: layers ", layers, ", hidden ", hidden,
      ", heads ", heads, ", kv heads ", kv_heads, ", head dim ", head_dim, ", ffn ", ffn,
      ", vocab ", vocab);
  TP_CHECK(heads % kv_heads == 0, "[", where, "] heads ", heads, " is not a multiple of kv heads ",
           kv_heads);
  TP_CHECK(experts >= 0 && experts_per_token >= 0 && experts_per_token <= experts, "[", where,
           "] experts per token ", experts_per_token, " must be in [0, experts ", experts, "]");
  TP_CHECK(!is_moe() || experts_per_token > 0, "[", where,
           "] an MoE model needs --experts-per-token > 0");
}

ModelSpec megatron_gpt(int64_t layers, int64_t hidden, int64_t heads, int64_t vocab, int64_t seq) {
  ModelSpec m;
  m.name = "gpt";
  m.layers = layers;
  m.hidden = hidden;
  m.heads = heads;
  m.kv_heads = heads;
  m.head_dim = hidden / heads;
  m.ffn = 4 * hidden;
  m.vocab = vocab;
  m.positions = seq;
  m.mlp = MlpMatrices::kPlain;
  m.tied_embeddings = true;
  m.linear_biases = true;
  m.norm_vectors = 2;
  m.dropout = true;
  return m;
}

namespace {

int64_t mlp_matrices(const ModelSpec& m) {
  return m.mlp == MlpMatrices::kGated ? 3 : 2;
}

// One expert's (or the dense) MLP: weights plus biases when the model has them.
int64_t mlp_parameters(const ModelSpec& m) {
  int64_t p = mlp_matrices(m) * m.hidden * m.ffn;
  if (m.linear_biases) p += (mlp_matrices(m) - 1) * m.ffn + m.hidden;
  return p;
}

int64_t attention_parameters(const ModelSpec& m) {
  const int64_t qkv_out = m.q_dim() + 2 * m.kv_dim();
  int64_t p = m.hidden * qkv_out + m.q_dim() * m.hidden;
  if (m.linear_biases)
    p += qkv_out + m.hidden;
  else if (m.qkv_bias)
    p += qkv_out;
  return p;
}

int64_t router_parameters(const ModelSpec& m) {
  return m.is_moe() ? m.hidden * m.experts : 0;
}

}  // namespace

int64_t layer_parameters(const ModelSpec& m) {
  const int64_t n_mlp = m.is_moe() ? m.experts : 1;
  return attention_parameters(m) + n_mlp * mlp_parameters(m) + router_parameters(m) +
         2 * m.norm_vectors * m.hidden;
}

int64_t embedding_parameters(const ModelSpec& m) {
  return (m.vocab + m.positions) * m.hidden;
}

int64_t head_parameters(const ModelSpec& m) {
  return m.norm_vectors * m.hidden + (m.tied_embeddings ? 0 : m.vocab * m.hidden);
}

int64_t total_parameters(const ModelSpec& m) {
  return m.layers * layer_parameters(m) + embedding_parameters(m) + head_parameters(m);
}

int64_t active_parameters(const ModelSpec& m) {
  if (!m.is_moe()) return total_parameters(m);
  const int64_t idle = (m.experts - m.experts_per_token) * mlp_parameters(m);
  return total_parameters(m) - m.layers * idle;
}

LayerFlops layer_forward_flops(const ModelSpec& m, double b, double s) {
  const double tokens = b * s, C = double(m.hidden);
  const double qkv = C * double(m.q_dim() + 2 * m.kv_dim());
  const double proj = double(m.q_dim()) * C;
  const double mlp =
      double(mlp_matrices(m)) * C * double(m.ffn) * double(m.is_moe() ? m.experts_per_token : 1);
  const double router = C * double(m.experts);
  LayerFlops f;
  f.linear = 2.0 * tokens * (qkv + proj + mlp + router);
  f.attention = 2.0 * 2.0 * b * s * s * double(m.q_dim());  // Q K^T and P V
  return f;
}

double head_forward_flops(const ModelSpec& m, double b, double s) {
  return 2.0 * b * s * double(m.hidden) * double(m.vocab);
}

double model_flops_per_iteration(const ModelSpec& m, double B, double s) {
  const LayerFlops f = layer_forward_flops(m, B, s);
  return 3.0 * (double(m.layers) * (f.linear + f.attention) + head_forward_flops(m, B, s));
}

}  // namespace tensorpar::plan

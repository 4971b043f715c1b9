// The Llama family (Llama 2/3, SmolLM2, Mistral, Qwen2): tensor names in HF checkpoints and in
// llama.cpp GGUF files, and the parameter list a trainer sees. GGUF llama-arch Q/K rows stay in
// the converter's permuted order; the config selects interleaved RoPE for them (gguf_config.cpp).
#include <string>

#include "core/error.h"
#include "model/transformer.h"

namespace tensorpar {

namespace {

struct LlamaNames {
  bool gguf = false;
  std::string embed() const { return gguf ? "token_embd.weight" : "model.embed_tokens.weight"; }
  std::string head() const { return gguf ? "output.weight" : "lm_head.weight"; }
  std::string norm() const { return gguf ? "output_norm.weight" : "model.norm.weight"; }
  std::string layer(int64_t l, const char* hf, const char* gg) const {
    return gguf ? "blk." + std::to_string(l) + "." + gg : "model.layers." + std::to_string(l) + "." + hf;
  }
};

}  // namespace

void load_llama(Transformer& m, const WeightSource& src) {
  const ModelConfig& c = m.config_;
  LlamaNames n{src.has("token_embd.weight")};
  const int64_t C = c.hidden, V = c.vocab_size, Q = c.n_heads * c.head_dim, KV = c.n_kv_heads * c.head_dim;
  m.embed_.value = src.matrix(n.embed(), {V, C})(0, m.vocab_range_);
  if (!c.tie_embeddings) m.lm_head_.value = src.matrix(n.head(), {V, C})(0, m.vocab_range_);
  m.norm_w_.value = src.whole_f32(n.norm(), {C});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    TransformerLayer& L = m.layers_[size_t(l)];
    L.norm1_w.value = src.whole_f32(n.layer(l, "input_layernorm.weight", "attn_norm.weight"), {C});
    L.norm2_w.value = src.whole_f32(n.layer(l, "post_attention_layernorm.weight", "ffn_norm.weight"), {C});
    AttentionLoaders a;
    a.q = src.matrix(n.layer(l, "self_attn.q_proj.weight", "attn_q.weight"), {Q, C});
    a.k = src.matrix(n.layer(l, "self_attn.k_proj.weight", "attn_k.weight"), {KV, C});
    a.v = src.matrix(n.layer(l, "self_attn.v_proj.weight", "attn_v.weight"), {KV, C});
    a.o = src.matrix(n.layer(l, "self_attn.o_proj.weight", "attn_output.weight"), {C, Q});
    if (c.qkv_bias) {
      a.q_bias = src.f32(n.layer(l, "self_attn.q_proj.bias", "attn_q.bias"), {Q});
      a.k_bias = src.f32(n.layer(l, "self_attn.k_proj.bias", "attn_k.bias"), {KV});
      a.v_bias = src.f32(n.layer(l, "self_attn.v_proj.bias", "attn_v.bias"), {KV});
    }
    L.attn->load(a);
    L.mlp->gate().load(src.matrix(n.layer(l, "mlp.gate_proj.weight", "ffn_gate.weight"), {c.ffn, C}));
    L.mlp->up().load(src.matrix(n.layer(l, "mlp.up_proj.weight", "ffn_up.weight"), {c.ffn, C}));
    L.mlp->down().load(src.matrix(n.layer(l, "mlp.down_proj.weight", "ffn_down.weight"), {C, c.ffn}));
  }
}

std::vector<ParamShard> Transformer::parameters_llama() {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden, V = c.vocab_size, HS = c.head_dim, Q = c.n_heads * HS, KV = c.n_kv_heads * HS;
  const int tp = tp_.size();
  std::vector<ParamShard> out;
  append_param(out, "model.embed_tokens.weight", embed_.value, embed_.grad, {V, C}, 0, vocab_range_);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    TransformerLayer& L = layers_[size_t(l)];
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ParallelAttention& A = *L.attn;
    const Range qr{A.heads().q.begin * HS, A.heads().q.end * HS}, kr{A.heads().kv.begin * HS, A.heads().kv.end * HS};
    append_param(out, p + "input_layernorm.weight", L.norm1_w.value, L.norm1_w.grad, {C}, -1, {0, C}, tp);
    append_param(out, p + "self_attn.q_proj.weight", A.q().w, A.q().dw, {Q, C}, 0, qr);
    append_param(out, p + "self_attn.k_proj.weight", A.k().w, A.k().dw, {KV, C}, 0, kr, A.kv_copies());
    append_param(out, p + "self_attn.v_proj.weight", A.v().w, A.v().dw, {KV, C}, 0, kr, A.kv_copies());
    if (c.qkv_bias) {
      append_param(out, p + "self_attn.q_proj.bias", A.q().b, A.q().db, {Q}, 0, qr);
      append_param(out, p + "self_attn.k_proj.bias", A.k().b, A.k().db, {KV}, 0, kr, A.kv_copies());
      append_param(out, p + "self_attn.v_proj.bias", A.v().b, A.v().db, {KV}, 0, kr, A.kv_copies());
    }
    append_param(out, p + "self_attn.o_proj.weight", A.o().weight(), A.o().d_weight(), {C, Q}, 1, A.o().in_range());
    append_param(out, p + "post_attention_layernorm.weight", L.norm2_w.value, L.norm2_w.grad, {C}, -1, {0, C}, tp);
    ParallelMlp& M = *L.mlp;
    const Range fr = M.up().out_range();
    append_param(out, p + "mlp.gate_proj.weight", M.gate().weight(), M.gate().d_weight(), {c.ffn, C}, 0, fr);
    append_param(out, p + "mlp.up_proj.weight", M.up().weight(), M.up().d_weight(), {c.ffn, C}, 0, fr);
    append_param(out, p + "mlp.down_proj.weight", M.down().weight(), M.down().d_weight(), {C, c.ffn}, 1, fr);
  }
  append_param(out, "model.norm.weight", norm_w_.value, norm_w_.grad, {C}, -1, {0, C}, tp);
  if (!c.tie_embeddings)
    append_param(out, "lm_head.weight", lm_head_.value, lm_head_.grad, {V, C}, 0, vocab_range_);
  return out;
}

}  // namespace tensorpar

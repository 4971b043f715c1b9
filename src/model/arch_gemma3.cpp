// Gemma 3 (Gemma3ForCausalLM, llama.cpp's gemma3): tensor names in HF checkpoints and in GGUF
// files, and the parameter list a trainer sees. Four norms per layer (HF's
// "post_attention_layernorm" is the norm after attention, not before the MLP as in Llama) and q/k
// norms over the head dims. HF stores norm weights as w with (1 + w) applied, GGUF as 1 + w: the
// config's norm_weight_offset says which (gguf_config.cpp). GGUF Q/K rows are not permuted for
// gemma3, so both formats use half-split RoPE. The LM head is the tied embedding.
#include <string>

#include "core/error.h"
#include "model/arch_names.h"
#include "model/transformer.h"

namespace tensorpar {

void load_gemma3(Transformer& m, const WeightSource& src) {
  const ModelConfig& c = m.config_;
  ArchNames n{src.has("token_embd.weight")};
  const int64_t C = c.hidden, V = c.vocab_size, HS = c.head_dim;
  if (m.embed_) m.embed_->load(src.matrix(n.embed(), {V, C}));
  if (m.lm_head_) m.lm_head_->load(src.matrix(n.head(), {V, C}));
  if (m.final_norm_) m.final_norm_->weight().value = src.whole_f32(n.norm(), {C});
  for (int64_t l = m.span_.first; l < m.span_.last; ++l) {
    TransformerLayer& L = m.layer(l);
    L.norm1().weight().value = src.whole_f32(n.layer(l, "input_layernorm.weight", "attn_norm.weight"), {C});
    L.post_attn_norm().weight().value =
        src.whole_f32(n.layer(l, "post_attention_layernorm.weight", "post_attention_norm.weight"), {C});
    L.norm2().weight().value = src.whole_f32(n.layer(l, "pre_feedforward_layernorm.weight", "ffn_norm.weight"), {C});
    L.post_mlp_norm().weight().value =
        src.whole_f32(n.layer(l, "post_feedforward_layernorm.weight", "post_ffw_norm.weight"), {C});
    ParallelAttention& a = L.attn();
    a.q_norm_weight() = src.whole_f32(n.layer(l, "self_attn.q_norm.weight", "attn_q_norm.weight"), {HS});
    a.k_norm_weight() = src.whole_f32(n.layer(l, "self_attn.k_norm.weight", "attn_k_norm.weight"), {HS});
    load_llama_like_projections(L, src, n, l, c);
  }
}

std::vector<ParamShard> Transformer::parameters_gemma3() {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden, V = c.vocab_size, HS = c.head_dim;
  const int tp = tp_.size();
  std::vector<ParamShard> out;
  if (span_.embedding)
    append_param(out, "model.embed_tokens.weight", embed_->weight(), embed_->d_weight(), {V, C}, 0, vocab_range_);
  auto replicated = [&](const std::string& name, Param& p, int64_t size) {
    append_param(out, name, p.value, p.grad, {size}, -1, {0, size}, tp);
  };
  for (int64_t l = span_.first; l < span_.last; ++l) {
    const size_t first = out.size();
    TransformerLayer& L = layer(l);
    const std::string p = "model.layers." + std::to_string(l) + ".";
    replicated(p + "input_layernorm.weight", L.norm1().weight(), C);
    ParallelAttention& a = L.attn();
    append_qkv_params(out, L, p);
    append_param(out, p + "self_attn.q_norm.weight", a.q_norm_weight(), a.q_norm_grad(), {HS}, -1, {0, HS}, tp);
    append_param(out, p + "self_attn.k_norm.weight", a.k_norm_weight(), a.k_norm_grad(), {HS}, -1, {0, HS}, tp);
    append_o_param(out, L, p);
    replicated(p + "post_attention_layernorm.weight", L.post_attn_norm().weight(), C);
    replicated(p + "pre_feedforward_layernorm.weight", L.norm2().weight(), C);
    append_mlp_params(out, L, p);
    replicated(p + "post_feedforward_layernorm.weight", L.post_mlp_norm().weight(), C);
    mark_grad_part(out, first, l);
  }
  const size_t head = out.size();
  if (span_.head) {
    replicated("model.norm.weight", final_norm_->weight(), C);
    append_lm_head_param(out);
  }
  mark_grad_part(out, head, kHeadGrads);
  return out;
}

}  // namespace tensorpar

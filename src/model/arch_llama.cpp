// The Llama family (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3; the MoE models Mixtral, Qwen2-MoE and
// Qwen3-MoE): tensor names in HF checkpoints and in
// llama.cpp GGUF files, and the parameter list a trainer sees. GGUF llama-arch Q/K rows stay in
// the converter's permuted order; the config selects interleaved RoPE for them (gguf_config.cpp).
#include <string>

#include "core/error.h"
#include "model/arch_names.h"
#include "model/transformer.h"

namespace tensorpar {

namespace {

// An MoE layer's tensors under HF names: Mixtral's block_sparse_moe.{gate, experts.<e>.w1/w3/w2}
// (gate, up, down), Qwen's mlp.{gate, experts.<e>.gate_proj/up_proj/down_proj, shared_expert.*,
// shared_expert_gate}.
struct MoeNames {
  std::string block;  // "block_sparse_moe." or "mlp."
  const char *gate, *up, *down;
  std::string router(const std::string& p) const { return p + block + "gate.weight"; }
  std::string expert(const std::string& p, int64_t e, const char* which) const {
    return p + block + "experts." + std::to_string(e) + "." + which + ".weight";
  }
};

MoeNames moe_names(const ModelConfig& c) {
  if (c.model_type == "mixtral") return {"block_sparse_moe.", "w1", "w3", "w2"};
  return {"mlp.", "gate_proj", "up_proj", "down_proj"};
}

// GGUF (llama.cpp's names): the router blk.<l>.ffn_gate_inp, the experts stacked into
// ffn_{gate,up,down}_exps (E, F, C) / (E, C, F), the shared expert ffn_*_shexp and its gate
// ffn_gate_inp_shexp ((C) or (1, C)). Each rank reads only its experts' slices.
void load_moe_gguf(ParallelMoe& moe, const WeightSource& src, const ArchNames& n, int64_t l, const ModelConfig& c) {
  const int64_t C = c.hidden, E = c.moe.n_experts, F = c.moe.expert_ffn;
  moe.router_weight() = src.whole_f32(n.layer(l, "", "ffn_gate_inp.weight"), {E, C});
  for (int64_t e = moe.local_experts().begin; e < moe.local_experts().end; ++e) {
    const SliceLoader gate_up[2] = {src.stacked(n.layer(l, "", "ffn_gate_exps.weight"), E, e, {F, C}),
                                    src.stacked(n.layer(l, "", "ffn_up_exps.weight"), E, e, {F, C})};
    moe.expert(e).in().load(gate_up);
    moe.expert(e).down().load(src.stacked(n.layer(l, "", "ffn_down_exps.weight"), E, e, {C, F}));
  }
  if (moe.has_shared()) {
    const int64_t Fs = c.moe.shared_ffn;
    const SliceLoader gate_up[2] = {src.matrix(n.layer(l, "", "ffn_gate_shexp.weight"), {Fs, C}),
                                    src.matrix(n.layer(l, "", "ffn_up_shexp.weight"), {Fs, C})};
    moe.shared().in().load(gate_up);
    moe.shared().down().load(src.matrix(n.layer(l, "", "ffn_down_shexp.weight"), {C, Fs}));
    const std::string gate = n.layer(l, "", "ffn_gate_inp_shexp.weight");
    const auto info = src.store().find(gate);
    const bool flat = info && info->shape.size() == 1;
    moe.shared_gate_weight() = src.whole_f32(gate, flat ? Shape{C} : Shape{1, C}).reshape({1, C}).contiguous();
  }
}

void load_moe(ParallelMoe& moe, const WeightSource& src, const ArchNames& n, int64_t l, const ModelConfig& c) {
  if (n.gguf) {
    load_moe_gguf(moe, src, n, l, c);
    return;
  }
  const int64_t C = c.hidden, E = c.moe.n_experts, F = c.moe.expert_ffn;
  const MoeNames m = moe_names(c);
  const std::string p = "model.layers." + std::to_string(l) + ".";
  moe.router_weight() = src.whole_f32(m.router(p), {E, C});
  for (int64_t e = moe.local_experts().begin; e < moe.local_experts().end; ++e) {
    const SliceLoader gate_up[2] = {src.matrix(m.expert(p, e, m.gate), {F, C}), src.matrix(m.expert(p, e, m.up), {F, C})};
    moe.expert(e).in().load(gate_up);
    moe.expert(e).down().load(src.matrix(m.expert(p, e, m.down), {C, F}));
  }
  if (moe.has_shared()) {
    const int64_t Fs = c.moe.shared_ffn;
    const SliceLoader gate_up[2] = {src.matrix(p + "mlp.shared_expert.gate_proj.weight", {Fs, C}),
                                    src.matrix(p + "mlp.shared_expert.up_proj.weight", {Fs, C})};
    moe.shared().in().load(gate_up);
    moe.shared().down().load(src.matrix(p + "mlp.shared_expert.down_proj.weight", {C, Fs}));
    moe.shared_gate_weight() = src.whole_f32(p + "mlp.shared_expert_gate.weight", {1, C});
  }
}

}  // namespace

void load_llama_like_projections(TransformerLayer& L, const WeightSource& src, const ArchNames& n, int64_t l,
                                 const ModelConfig& c) {
  const int64_t C = c.hidden, Q = c.n_heads * c.head_dim, KV = c.n_kv_heads * c.head_dim;
  const SliceLoader qkv[3] = {src.matrix(n.layer(l, "self_attn.q_proj.weight", "attn_q.weight"), {Q, C}),
                              src.matrix(n.layer(l, "self_attn.k_proj.weight", "attn_k.weight"), {KV, C}),
                              src.matrix(n.layer(l, "self_attn.v_proj.weight", "attn_v.weight"), {KV, C})};
  if (c.qkv_bias) {
    const SliceLoader bias[3] = {src.f32(n.layer(l, "self_attn.q_proj.bias", "attn_q.bias"), {Q}),
                                 src.f32(n.layer(l, "self_attn.k_proj.bias", "attn_k.bias"), {KV}),
                                 src.f32(n.layer(l, "self_attn.v_proj.bias", "attn_v.bias"), {KV})};
    L.attn().qkv().load(qkv, bias);
  } else {
    L.attn().qkv().load(qkv);
  }
  L.attn().o().load(src.matrix(n.layer(l, "self_attn.o_proj.weight", "attn_output.weight"), {C, Q}));
  if (L.is_moe()) {
    load_moe(L.moe(), src, n, l, c);
    return;
  }
  const SliceLoader gate_up[2] = {src.matrix(n.layer(l, "mlp.gate_proj.weight", "ffn_gate.weight"), {c.ffn, C}),
                                  src.matrix(n.layer(l, "mlp.up_proj.weight", "ffn_up.weight"), {c.ffn, C})};
  L.mlp().in().load(gate_up);
  L.mlp().down().load(src.matrix(n.layer(l, "mlp.down_proj.weight", "ffn_down.weight"), {C, c.ffn}));
}

void load_llama(Transformer& m, const WeightSource& src) {
  const ModelConfig& c = m.config_;
  ArchNames n{src.has("token_embd.weight")};
  const int64_t C = c.hidden, V = c.vocab_size;
  if (m.embed_) m.embed_->load(src.matrix(n.embed(), {V, C}));
  if (m.lm_head_) m.lm_head_->load(src.matrix(n.head(), {V, C}));
  if (m.final_norm_) m.final_norm_->weight().value = src.whole_f32(n.norm(), {C});
  for (int64_t l = m.span_.first; l < m.span_.last; ++l) {
    TransformerLayer& L = m.layer(l);
    L.norm1().weight().value = src.whole_f32(n.layer(l, "input_layernorm.weight", "attn_norm.weight"), {C});
    L.norm2().weight().value = src.whole_f32(n.layer(l, "post_attention_layernorm.weight", "ffn_norm.weight"), {C});
    if (c.qk_norm) {  // Qwen3
      L.attn().q_norm_weight() = src.whole_f32(n.layer(l, "self_attn.q_norm.weight", "attn_q_norm.weight"), {c.head_dim});
      L.attn().k_norm_weight() = src.whole_f32(n.layer(l, "self_attn.k_norm.weight", "attn_k_norm.weight"), {c.head_dim});
    }
    load_llama_like_projections(L, src, n, l, c);
  }
}

void Transformer::append_qkv_params(std::vector<ParamShard>& out, TransformerLayer& L, const std::string& p) {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden, Q = c.n_heads * c.head_dim, KV = c.n_kv_heads * c.head_dim;
  ColumnParallelLinear& qkv = L.attn().qkv();
  const char* names[3] = {"q_proj", "k_proj", "v_proj"};
  const int64_t outs[3] = {Q, KV, KV};
  for (int64_t i = 0; i < 3; ++i)
    append_param(out, p + "self_attn." + names[i] + ".weight", qkv.part_weight(i), qkv.part_d_weight(i),
                 {outs[i], C}, 0, qkv.part_range(i), qkv.part_copies(i));
  if (c.qkv_bias)
    for (int64_t i = 0; i < 3; ++i)
      append_param(out, p + "self_attn." + names[i] + ".bias", qkv.part_bias(i), qkv.part_d_bias(i), {outs[i]}, 0,
                   qkv.part_range(i), qkv.part_copies(i));
}

void Transformer::append_o_param(std::vector<ParamShard>& out, TransformerLayer& L, const std::string& p) {
  RowParallelLinear& o = L.attn().o();
  append_param(out, p + "self_attn.o_proj.weight", o.weight(), o.d_weight(),
               {config_.hidden, config_.n_heads * config_.head_dim}, o.shard_dim(), o.shard_range());
}

void Transformer::append_lm_head_param(std::vector<ParamShard>& out) {
  if (lm_head_)
    append_param(out, "lm_head.weight", lm_head_->weight(), lm_head_->d_weight(), {config_.vocab_size, config_.hidden},
                 0, vocab_range_);
}

void Transformer::append_moe_params(std::vector<ParamShard>& out, TransformerLayer& L, const std::string& p) {
  const int64_t C = config_.hidden, E = config_.moe.n_experts, F = config_.moe.expert_ffn;
  const MoeNames m = moe_names(config_);
  ParallelMoe& moe = L.moe();
  append_param(out, m.router(p), moe.router_weight(), moe.router_grad(), {E, C}, -1, {0, E}, tp_.size());
  for (int64_t e = moe.local_experts().begin; e < moe.local_experts().end; ++e) {
    ColumnParallelLinear& gu = moe.expert(e).in();
    RowParallelLinear& down = moe.expert(e).down();
    append_param(out, m.expert(p, e, m.gate), gu.part_weight(0), gu.part_d_weight(0), {F, C}, 0, gu.part_range(0));
    append_param(out, m.expert(p, e, m.up), gu.part_weight(1), gu.part_d_weight(1), {F, C}, 0, gu.part_range(1));
    append_param(out, m.expert(p, e, m.down), down.weight(), down.d_weight(), {C, F}, down.shard_dim(), down.shard_range());
  }
  if (ep_.dispatch)
    for (size_t i = out.size() - size_t(3 * moe.local_experts().size()); i < out.size(); ++i) out[i].expert = true;
  if (moe.has_shared()) {
    const int64_t Fs = config_.moe.shared_ffn;
    ColumnParallelLinear& gu = moe.shared().in();
    RowParallelLinear& down = moe.shared().down();
    append_param(out, p + "mlp.shared_expert.gate_proj.weight", gu.part_weight(0), gu.part_d_weight(0), {Fs, C}, 0,
                 gu.part_range(0));
    append_param(out, p + "mlp.shared_expert.up_proj.weight", gu.part_weight(1), gu.part_d_weight(1), {Fs, C}, 0,
                 gu.part_range(1));
    append_param(out, p + "mlp.shared_expert.down_proj.weight", down.weight(), down.d_weight(), {C, Fs}, down.shard_dim(),
                 down.shard_range());
    append_param(out, p + "mlp.shared_expert_gate.weight", moe.shared_gate_weight(), moe.shared_gate_grad(), {1, C},
                 -1, {0, 1}, tp_.size());
  }
}

void Transformer::append_mlp_params(std::vector<ParamShard>& out, TransformerLayer& L, const std::string& p) {
  if (L.is_moe()) {
    append_moe_params(out, L, p);
    return;
  }
  const int64_t C = config_.hidden, F = config_.ffn;
  ColumnParallelLinear& gu = L.mlp().in();
  append_param(out, p + "mlp.gate_proj.weight", gu.part_weight(0), gu.part_d_weight(0), {F, C}, 0, gu.part_range(0));
  append_param(out, p + "mlp.up_proj.weight", gu.part_weight(1), gu.part_d_weight(1), {F, C}, 0, gu.part_range(1));
  RowParallelLinear& down = L.mlp().down();
  append_param(out, p + "mlp.down_proj.weight", down.weight(), down.d_weight(), {C, F}, down.shard_dim(), down.shard_range());
}

std::vector<ParamShard> Transformer::parameters_llama() {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden, V = c.vocab_size;
  const int tp = tp_.size();
  std::vector<ParamShard> out;
  if (span_.embedding)
    append_param(out, "model.embed_tokens.weight", embed_->weight(), embed_->d_weight(), {V, C}, 0, vocab_range_);
  for (int64_t l = span_.first; l < span_.last; ++l) {
    const size_t first = out.size();
    TransformerLayer& L = layer(l);
    const std::string p = "model.layers." + std::to_string(l) + ".";
    append_param(out, p + "input_layernorm.weight", L.norm1().weight().value, L.norm1().weight().grad, {C}, -1,
                 {0, C}, tp);
    append_qkv_params(out, L, p);
    if (c.qk_norm) {  // Qwen3
      ParallelAttention& a = L.attn();
      append_param(out, p + "self_attn.q_norm.weight", a.q_norm_weight(), a.q_norm_grad(), {c.head_dim}, -1,
                   {0, c.head_dim}, tp);
      append_param(out, p + "self_attn.k_norm.weight", a.k_norm_weight(), a.k_norm_grad(), {c.head_dim}, -1,
                   {0, c.head_dim}, tp);
    }
    append_o_param(out, L, p);
    append_param(out, p + "post_attention_layernorm.weight", L.norm2().weight().value, L.norm2().weight().grad, {C},
                 -1, {0, C}, tp);
    append_mlp_params(out, L, p);
    mark_grad_part(out, first, l);
  }
  const size_t head = out.size();
  if (span_.head) {
    append_param(out, "model.norm.weight", final_norm_->weight().value, final_norm_->weight().grad, {C}, -1, {0, C},
                 tp);
    append_lm_head_param(out);
  }
  mark_grad_part(out, head, kHeadGrads);
  return out;
}

}  // namespace tensorpar

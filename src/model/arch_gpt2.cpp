// GPT-2: learned positions, LayerNorm with biases, GELU (tanh) MLP, biases everywhere, tied LM
// head. HF stores Conv1D weights as [in, out]; the fused c_attn [C, 3C] holds q | k | v column
// blocks. Each rank reads the columns of its heads (and the transposed slices of the other
// Conv1D weights) and keeps them as [out, in] like every other layer.
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/transformer.h"

namespace tensorpar {

void load_gpt2(Transformer& m, const WeightSource& src) {
  const ModelConfig& c = m.config_;
  const std::string pre = src.has("transformer.wte.weight") ? "transformer." : "";
  const int64_t C = c.hidden, V = c.vocab_size, F = c.ffn;
  m.embed_.value = src.matrix(pre + "wte.weight", {V, C})(0, m.vocab_range_);
  m.pos_embed_.value = src.whole_f32(pre + "wpe.weight", {c.max_position, C});
  m.norm_w_.value = src.whole_f32(pre + "ln_f.weight", {C});
  m.norm_b_.value = src.whole_f32(pre + "ln_f.bias", {C});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    TransformerLayer& L = m.layers_[size_t(l)];
    const std::string p = pre + "h." + std::to_string(l) + ".";
    L.norm1_w.value = src.whole_f32(p + "ln_1.weight", {C});
    L.norm1_b.value = src.whole_f32(p + "ln_1.bias", {C});
    L.norm2_w.value = src.whole_f32(p + "ln_2.weight", {C});
    L.norm2_b.value = src.whole_f32(p + "ln_2.bias", {C});
    AttentionLoaders a;
    const std::string qkv = p + "attn.c_attn.weight", qkv_b = p + "attn.c_attn.bias";
    a.q = src.fused(qkv, {C, 3 * C}, 1, 0, {C, C}, true);
    a.k = src.fused(qkv, {C, 3 * C}, 1, C, {C, C}, true);
    a.v = src.fused(qkv, {C, 3 * C}, 1, 2 * C, {C, C}, true);
    a.q_bias = src.fused(qkv_b, {3 * C}, 0, 0, {C}, false);
    a.k_bias = src.fused(qkv_b, {3 * C}, 0, C, {C}, false);
    a.v_bias = src.fused(qkv_b, {3 * C}, 0, 2 * C, {C}, false);
    a.o = src.matrix(p + "attn.c_proj.weight", {C, C}, true);
    a.o_bias = src.f32(p + "attn.c_proj.bias", {C});
    L.attn->load(a);
    L.mlp->up().load(src.matrix(p + "mlp.c_fc.weight", {F, C}, true), src.f32(p + "mlp.c_fc.bias", {F}));
    L.mlp->down().load(src.matrix(p + "mlp.c_proj.weight", {C, F}, true), src.f32(p + "mlp.c_proj.bias", {C}));
  }
}

std::vector<ParamShard> Transformer::parameters_gpt2() {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden, V = c.vocab_size, HS = c.head_dim, F = c.ffn;
  const int tp = tp_.size();
  std::vector<ParamShard> out;
  append_param(out, "transformer.wte.weight", embed_.value, embed_.grad, {V, C}, 0, vocab_range_);
  append_param(out, "transformer.wpe.weight", pos_embed_.value, pos_embed_.grad, {c.max_position, C}, -1,
               {0, c.max_position}, tp);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    TransformerLayer& L = layers_[size_t(l)];
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    ParallelAttention& A = *L.attn;
    const Range qr{A.heads().q.begin * HS, A.heads().q.end * HS}, kr{A.heads().kv.begin * HS, A.heads().kv.end * HS};
    append_param(out, p + "ln_1.weight", L.norm1_w.value, L.norm1_w.grad, {C}, -1, {0, C}, tp);
    append_param(out, p + "ln_1.bias", L.norm1_b.value, L.norm1_b.grad, {C}, -1, {0, C}, tp);
    append_param(out, p + "attn.c_attn.q.weight", A.q().w, A.q().dw, {C, C}, 0, qr);
    append_param(out, p + "attn.c_attn.k.weight", A.k().w, A.k().dw, {C, C}, 0, kr, A.kv_copies());
    append_param(out, p + "attn.c_attn.v.weight", A.v().w, A.v().dw, {C, C}, 0, kr, A.kv_copies());
    append_param(out, p + "attn.c_attn.q.bias", A.q().b, A.q().db, {C}, 0, qr);
    append_param(out, p + "attn.c_attn.k.bias", A.k().b, A.k().db, {C}, 0, kr, A.kv_copies());
    append_param(out, p + "attn.c_attn.v.bias", A.v().b, A.v().db, {C}, 0, kr, A.kv_copies());
    append_param(out, p + "attn.c_proj.weight", A.o().weight(), A.o().d_weight(), {C, C}, 1, A.o().in_range());
    append_param(out, p + "attn.c_proj.bias", A.o().bias(), A.o().d_bias(), {C}, -1, {0, C}, tp);
    append_param(out, p + "ln_2.weight", L.norm2_w.value, L.norm2_w.grad, {C}, -1, {0, C}, tp);
    append_param(out, p + "ln_2.bias", L.norm2_b.value, L.norm2_b.grad, {C}, -1, {0, C}, tp);
    ParallelMlp& M = *L.mlp;
    const Range fr = M.up().out_range();
    append_param(out, p + "mlp.c_fc.weight", M.up().weight(), M.up().d_weight(), {F, C}, 0, fr);
    append_param(out, p + "mlp.c_fc.bias", M.up().bias(), M.up().d_bias(), {F}, 0, fr);
    append_param(out, p + "mlp.c_proj.weight", M.down().weight(), M.down().d_weight(), {C, F}, 1, fr);
    append_param(out, p + "mlp.c_proj.bias", M.down().bias(), M.down().d_bias(), {C}, -1, {0, C}, tp);
  }
  append_param(out, "transformer.ln_f.weight", norm_w_.value, norm_w_.grad, {C}, -1, {0, C}, tp);
  append_param(out, "transformer.ln_f.bias", norm_b_.value, norm_b_.grad, {C}, -1, {0, C}, tp);
  return out;
}

}  // namespace tensorpar

// GPT-2: learned positions, LayerNorm with biases, GELU (tanh) MLP, biases everywhere, an LM
// head tied to the embedding unless the config says `tie_word_embeddings: false` (then HF's
// `lm_head.weight`, an nn.Linear [vocab, hidden]). HF stores Conv1D weights as [in, out]; the
// fused c_attn [C, 3C] holds q | k | v column blocks. Each rank reads the columns of its heads
// (and the transposed slices of the other Conv1D weights) and keeps them as [out, in] like every
// other layer.
#include <cmath>
#include <string>

#include "core/error.h"
#include "model/transformer.h"

namespace tensorpar {

void load_gpt2(Transformer& m, const WeightSource& src) {
  const ModelConfig& c = m.config_;
  const std::string pre = src.has("transformer.wte.weight") ? "transformer." : "";
  const int64_t C = c.hidden, V = c.vocab_size, F = c.ffn;
  if (m.embed_) {
    m.embed_->load(src.matrix(pre + "wte.weight", {V, C}));
    m.pos_embed_.value = src.whole_f32(pre + "wpe.weight", {c.max_position, C});
  }
  if (m.lm_head_) m.lm_head_->load(src.matrix("lm_head.weight", {V, C}));
  if (m.final_norm_) {
    m.final_norm_->weight().value = src.whole_f32(pre + "ln_f.weight", {C});
    m.final_norm_->bias().value = src.whole_f32(pre + "ln_f.bias", {C});
  }
  for (int64_t l = m.span_.first; l < m.span_.last; ++l) {
    TransformerLayer& L = m.layer(l);
    const std::string p = pre + "h." + std::to_string(l) + ".";
    L.norm1().weight().value = src.whole_f32(p + "ln_1.weight", {C});
    L.norm1().bias().value = src.whole_f32(p + "ln_1.bias", {C});
    L.norm2().weight().value = src.whole_f32(p + "ln_2.weight", {C});
    L.norm2().bias().value = src.whole_f32(p + "ln_2.bias", {C});
    const std::string qkv = p + "attn.c_attn.weight", qkv_b = p + "attn.c_attn.bias";
    const SliceLoader w[3] = {src.fused(qkv, {C, 3 * C}, 1, 0, {C, C}, true),
                              src.fused(qkv, {C, 3 * C}, 1, C, {C, C}, true),
                              src.fused(qkv, {C, 3 * C}, 1, 2 * C, {C, C}, true)};
    const SliceLoader b[3] = {src.fused(qkv_b, {3 * C}, 0, 0, {C}, false),
                              src.fused(qkv_b, {3 * C}, 0, C, {C}, false),
                              src.fused(qkv_b, {3 * C}, 0, 2 * C, {C}, false)};
    L.attn().qkv().load(w, b);
    L.attn().o().load(src.matrix(p + "attn.c_proj.weight", {C, C}, true), src.f32(p + "attn.c_proj.bias", {C}));
    L.mlp().in().load(src.matrix(p + "mlp.c_fc.weight", {F, C}, true), src.f32(p + "mlp.c_fc.bias", {F}));
    L.mlp().down().load(src.matrix(p + "mlp.c_proj.weight", {C, F}, true), src.f32(p + "mlp.c_proj.bias", {C}));
  }
}

std::vector<ParamShard> Transformer::parameters_gpt2() {
  const ModelConfig& c = config_;
  const int64_t C = c.hidden, V = c.vocab_size, F = c.ffn;
  const int tp = tp_.size();
  std::vector<ParamShard> out;
  if (span_.embedding) {
    append_param(out, "transformer.wte.weight", embed_->weight(), embed_->d_weight(), {V, C}, 0, vocab_range_);
    append_param(out, "transformer.wpe.weight", pos_embed_.value, pos_embed_.grad, {c.max_position, C}, -1,
                 {0, c.max_position}, tp);
  }
  auto norm = [&](const std::string& name, Norm& n) {
    append_param(out, name + ".weight", n.weight().value, n.weight().grad, {C}, -1, {0, C}, tp);
    append_param(out, name + ".bias", n.bias().value, n.bias().grad, {C}, -1, {0, C}, tp);
  };
  for (int64_t l = span_.first; l < span_.last; ++l) {
    const size_t first = out.size();
    TransformerLayer& L = layer(l);
    const std::string p = "transformer.h." + std::to_string(l) + ".";
    ColumnParallelLinear& qkv = L.attn().qkv();
    norm(p + "ln_1", L.norm1());
    const char* names[3] = {"q", "k", "v"};
    for (int64_t i = 0; i < 3; ++i)
      append_param(out, p + "attn.c_attn." + names[i] + ".weight", qkv.part_weight(i), qkv.part_d_weight(i), {C, C},
                   0, qkv.part_range(i), qkv.part_copies(i));
    for (int64_t i = 0; i < 3; ++i)
      append_param(out, p + "attn.c_attn." + names[i] + ".bias", qkv.part_bias(i), qkv.part_d_bias(i), {C}, 0,
                   qkv.part_range(i), qkv.part_copies(i));
    RowParallelLinear& o = L.attn().o();
    append_param(out, p + "attn.c_proj.weight", o.weight(), o.d_weight(), {C, C}, o.shard_dim(), o.shard_range());
    append_param(out, p + "attn.c_proj.bias", o.bias(), o.d_bias(), {C}, -1, {0, C}, tp);
    norm(p + "ln_2", L.norm2());
    ColumnParallelLinear& fc = L.mlp().in();
    append_param(out, p + "mlp.c_fc.weight", fc.part_weight(0), fc.part_d_weight(0), {F, C}, 0, fc.part_range(0));
    append_param(out, p + "mlp.c_fc.bias", fc.part_bias(0), fc.part_d_bias(0), {F}, 0, fc.part_range(0));
    RowParallelLinear& down = L.mlp().down();
    append_param(out, p + "mlp.c_proj.weight", down.weight(), down.d_weight(), {C, F}, down.shard_dim(), down.shard_range());
    append_param(out, p + "mlp.c_proj.bias", down.bias(), down.d_bias(), {C}, -1, {0, C}, tp);
    mark_grad_part(out, first, l);
  }
  const size_t head = out.size();
  if (span_.head) {
    norm("transformer.ln_f", *final_norm_);
    append_lm_head_param(out);
  }
  mark_grad_part(out, head, kHeadGrads);
  return out;
}

}  // namespace tensorpar

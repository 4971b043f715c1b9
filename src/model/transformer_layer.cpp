// TransformerLayer (see transformer_layer.h).
#include "model/transformer_layer.h"

#include "core/error.h"

namespace tensorpar {

namespace {

AttentionShape attention_shape(const ModelConfig& c, int64_t layer) {
  const bool gpt2 = c.family == ArchFamily::kGpt2;
  AttentionShape as;
  as.window = c.is_sliding(layer) ? c.sliding_window : 0;
  as.scale = float(c.query_scale);
  as.qk_norm = c.qk_norm;
  as.norm_eps = float(c.norm_eps);
  as.norm_weight_offset = c.norm_weight_offset;
  as.hidden = c.hidden;
  as.n_heads = c.n_heads;
  as.n_kv_heads = c.n_kv_heads;
  as.head_dim = c.head_dim;
  as.qkv_bias = c.qkv_bias || gpt2;
  as.out_bias = gpt2;
  return as;
}

MlpKind mlp_kind(const ModelConfig& c) {
  switch (c.family) {
    case ArchFamily::kGpt2: return MlpKind::kGeluTanh;
    case ArchFamily::kGemma3: return MlpKind::kGeGlu;
    case ArchFamily::kLlama: break;
  }
  return MlpKind::kSwiGlu;
}

// out (N*C) = a + b elementwise (out may alias either).
void add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace

TransformerLayer::TransformerLayer(const ModelConfig& c, int64_t layer, const RopeTable* rope,
                                   const std::vector<Range>& ffn_ranges, int tp_size, int tp_rank,
                                   const ExpertSplit& experts, int64_t quant_align)
    : norm1_(c.hidden, c.family == ArchFamily::kGpt2, float(c.norm_eps), c.norm_weight_offset),
      norm2_(c.hidden, c.family == ArchFamily::kGpt2, float(c.norm_eps), c.norm_weight_offset),
      attn_(attention_shape(c, layer), rope, tp_size, tp_rank) {
  if (c.is_moe(layer)) {
    const MoeShape ms{c.hidden, c.moe.n_experts, c.moe.top_k, c.moe.expert_ffn, c.moe.norm_topk, c.moe.shared_ffn};
    moe_.emplace(ms, experts, quant_align);
  } else {
    mlp_.emplace(c.hidden, c.ffn, mlp_kind(c), c.family == ArchFamily::kGpt2, ffn_ranges, tp_rank);
  }
  if (c.family == ArchFamily::kGemma3) {
    post_attn_norm_.emplace(c.hidden, false, float(c.norm_eps), c.norm_weight_offset);
    post_mlp_norm_.emplace(c.hidden, false, float(c.norm_eps), c.norm_weight_offset);
  }
}

int64_t TransformerLayer::weight_bytes() const {
  int64_t n = norm1_.weight_bytes() + norm2_.weight_bytes() + attn_.weight_bytes() +
              (moe_ ? moe_->weight_bytes() : mlp_->weight_bytes());
  if (post_attn_norm_) n += post_attn_norm_->weight_bytes() + post_mlp_norm_->weight_bytes();
  return n;
}

void TransformerLayer::forward(const LayerContext& ctx, Tensor& out, const Tensor& x, const AttentionRows& rows,
                               LayerActs& a) const {
  TP_CHECK(x.ndim() == 2 && out.shape() == x.shape(), "[TransformerLayer::forward] x ", x.describe(), ", out ",
           out.describe(), ": expected the same (N, C)");
  const int64_t N = x.dim(0), C = x.dim(1);
  Tensor h1 = scratch_rows(a.h1, N, C), x_mid = scratch_rows(a.x_mid, N, C), h2 = scratch_rows(a.h2, N, C);
  Tensor mean1 = scratch_rows(a.mean1, N, 1), rstd1 = scratch_rows(a.rstd1, N, 1);
  Tensor mean2 = scratch_rows(a.mean2, N, 1), rstd2 = scratch_rows(a.rstd2, N, 1);
  norm1_.forward(h1.data<float>(), mean1.data<float>(), rstd1.data<float>(), x.data<float>(), N);
  if (post_attn_norm_) {
    Tensor attn_out = scratch_rows(a.attn_out, N, C);
    attn_.forward(ctx.eng, attn_out, h1, rows, a.attn, ctx.tp);
    post_attn_norm_->forward(x_mid.data<float>(), nullptr, scratch_rows(a.rstd_post_attn, N, 1).data<float>(),
                             attn_out.data<float>(), N);
  } else {
    attn_.forward(ctx.eng, x_mid, h1, rows, a.attn, ctx.tp);
  }
  add(x_mid.data<float>(), x_mid.data<float>(), x.data<float>(), N * C);
  norm2_.forward(h2.data<float>(), mean2.data<float>(), rstd2.data<float>(), x_mid.data<float>(), N);
  if (post_mlp_norm_) {
    Tensor mlp_out = scratch_rows(a.mlp_out, N, C);
    ffn_forward(ctx, mlp_out, h2, a);
    post_mlp_norm_->forward(out.data<float>(), nullptr, scratch_rows(a.rstd_post_mlp, N, 1).data<float>(),
                            mlp_out.data<float>(), N);
  } else {
    ffn_forward(ctx, out, h2, a);
  }
  add(out.data<float>(), x_mid.data<float>(), out.data<float>(), N * C);
}

void TransformerLayer::backward(const LayerContext& ctx, Tensor& d_x, Tensor& d_h, const Tensor& x,
                                const AttentionRows& rows, const LayerActs& a) {
  const int64_t N = x.dim(0);
  TP_CHECK(d_x.shape() == x.shape() && d_h.shape() == x.shape() && a.h1.ndim() == 2 && a.h1.dim(0) >= N,
           "[TransformerLayer::backward] d_x ", d_x.describe(), ", d_h ", d_h.describe(), ", x ", x.describe(),
           ": expected one (N, C) shape and the forward's activations");
  const Tensor h1 = a.h1.slice(0, 0, N), x_mid = a.x_mid.slice(0, 0, N), h2 = a.h2.slice(0, 0, N);
  // out = x_mid + [post_mlp_norm](mlp(norm2(x_mid))): d_x flows to x_mid directly and through
  // the MLP (and the post norm first, whose input gradient d_post is then the MLP's).
  Tensor d_post;
  if (post_mlp_norm_) {
    d_post = Tensor::zeros(x.shape(), DType::kF32);
    post_mlp_norm_->backward(d_post.data<float>(), d_x.data<float>(), a.mlp_out.data<float>(), nullptr,
                             a.rstd_post_mlp.data<float>(), N);
  }
  ffn_backward(ctx, d_h, post_mlp_norm_ ? d_post : d_x, h2, a);
  norm2_.backward(d_x.data<float>(), d_h.data<float>(), x_mid.data<float>(), a.mean2.data<float>(),
                  a.rstd2.data<float>(), N);
  if (post_attn_norm_) {
    d_post.fill_zero();
    post_attn_norm_->backward(d_post.data<float>(), d_x.data<float>(), a.attn_out.data<float>(), nullptr,
                              a.rstd_post_attn.data<float>(), N);
  }
  attn_.backward(ctx.eng, d_h, post_attn_norm_ ? d_post : d_x, h1, rows, a.attn, ctx.tp, ctx.kv_group);
  norm1_.backward(d_x.data<float>(), d_h.data<float>(), x.data<float>(), a.mean1.data<float>(),
                  a.rstd1.data<float>(), N);
}

void TransformerLayer::ffn_forward(const LayerContext& ctx, Tensor& out, const Tensor& x, LayerActs& a) const {
  if (moe_)
    moe_->forward(ctx.eng, out, x, a.moe, ctx.tp, ctx.ep_dispatch, ctx.moe_capacity_factor);
  else
    mlp_->forward(ctx.eng, out, x, a.mlp, ctx.tp);
}

void TransformerLayer::ffn_backward(const LayerContext& ctx, Tensor& d_x, const Tensor& d_out, const Tensor& x,
                                   const LayerActs& a) {
  if (moe_) {
    moe_->backward(ctx.eng, d_x, d_out, x, a.moe, ctx.moe_aux_dprob, ctx.moe_z_dlse, ctx.tp, ctx.ep_dispatch);
  } else {
    mlp_->backward(ctx.eng, d_x, d_out, x, a.mlp, ctx.tp);
  }
}

}  // namespace tensorpar

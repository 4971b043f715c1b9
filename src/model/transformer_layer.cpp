// TransformerLayer (see transformer_layer.h).
#include "model/transformer_layer.h"

#include "core/error.h"

namespace tensorpar {

namespace {

AttentionShape attention_shape(const ModelConfig& c) {
  const bool gpt2 = c.family == ArchFamily::kGpt2;
  AttentionShape as;
  as.hidden = c.hidden;
  as.n_heads = c.n_heads;
  as.n_kv_heads = c.n_kv_heads;
  as.head_dim = c.head_dim;
  as.qkv_bias = c.qkv_bias || gpt2;
  as.out_bias = gpt2;
  return as;
}

// out (N*C) = a + b elementwise (out may alias either).
void add(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

}  // namespace

TransformerLayer::TransformerLayer(const ModelConfig& c, const RopeTable* rope, const std::vector<Range>& ffn_ranges,
                                   int tp_size, int tp_rank)
    : norm1_(c.hidden, c.family == ArchFamily::kGpt2, float(c.norm_eps)),
      norm2_(c.hidden, c.family == ArchFamily::kGpt2, float(c.norm_eps)),
      attn_(attention_shape(c), rope, tp_size, tp_rank),
      mlp_(c.hidden, c.ffn, c.family == ArchFamily::kGpt2 ? MlpKind::kGeluTanh : MlpKind::kSwiGlu,
           c.family == ArchFamily::kGpt2, ffn_ranges, tp_rank) {}

int64_t TransformerLayer::weight_bytes() const {
  return norm1_.weight_bytes() + norm2_.weight_bytes() + attn_.weight_bytes() + mlp_.weight_bytes();
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
  attn_.forward(ctx.eng, x_mid, h1, rows, a.attn, ctx.tp);
  add(x_mid.data<float>(), x_mid.data<float>(), x.data<float>(), N * C);
  norm2_.forward(h2.data<float>(), mean2.data<float>(), rstd2.data<float>(), x_mid.data<float>(), N);
  mlp_.forward(ctx.eng, out, h2, a.mlp, ctx.tp);
  add(out.data<float>(), x_mid.data<float>(), out.data<float>(), N * C);
}

void TransformerLayer::backward(const LayerContext& ctx, Tensor& d_x, Tensor& d_h, const Tensor& x,
                                const AttentionRows& rows, const LayerActs& a) {
  const int64_t N = x.dim(0);
  TP_CHECK(d_x.shape() == x.shape() && d_h.shape() == x.shape() && a.h1.ndim() == 2 && a.h1.dim(0) >= N,
           "[TransformerLayer::backward] d_x ", d_x.describe(), ", d_h ", d_h.describe(), ", x ", x.describe(),
           ": expected one (N, C) shape and the forward's activations");
  const Tensor h1 = a.h1.slice(0, 0, N), x_mid = a.x_mid.slice(0, 0, N), h2 = a.h2.slice(0, 0, N);
  // out = x_mid + mlp(norm2(x_mid)): d_x flows to x_mid directly and through the MLP.
  mlp_.backward(ctx.eng, d_h, d_x, h2, a.mlp, ctx.tp);
  norm2_.backward(d_x.data<float>(), d_h.data<float>(), x_mid.data<float>(), a.mean2.data<float>(),
                  a.rstd2.data<float>(), N);
  attn_.backward(ctx.eng, d_h, d_x, h1, rows, a.attn, ctx.tp, ctx.kv_group);
  norm1_.backward(d_x.data<float>(), d_h.data<float>(), x.data<float>(), a.mean1.data<float>(),
                  a.rstd1.data<float>(), N);
}

}  // namespace tensorpar

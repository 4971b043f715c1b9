// TransformerLayer (see transformer_layer.h).
#include "model/transformer_layer.h"

#include <functional>

#include "core/error.h"
#include "kernels/cpu/elementwise.h"
#include "parallel/mappings.h"

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

// Sequence parallel (ctx.sequence_parallel): out, this rank's rows, = a TP region applied to h
// all-gathered; `region(partial, full)` writes its row-parallel partial sums (N, C), which are
// reduce-scattered into out. The caller adds the row-parallel bias.
template <typename Region>
void sequence_parallel_forward(const LayerContext& ctx, Tensor& out, const Tensor& h, Region&& region) {
  SequenceParallelScratch& sp = *ctx.sequence_parallel;
  Tensor full = scratch_rows(sp.full, sp.rows, h.dim(1)), partial = scratch_rows(sp.partial, sp.rows, h.dim(1));
  gather_from_sequence_parallel_region_forward(full, h, ctx.tp);
  region(partial, full);
  reduce_scatter_to_sequence_parallel_region_forward(out, partial, ctx.tp);
}

// Its backward: h is gathered again (only this rank's rows were kept) and so is d_out;
// `region(d_full, d_out_full, full, input_done)` adds the region's input gradient, Partial over
// TP, to the zeroed d_full, which is reduce-scattered into d_h. A region that calls input_done
// (may be empty) once d_full is complete has the reduce-scatter run on ctx.tp_async meanwhile.
template <typename Region>
void sequence_parallel_backward(const LayerContext& ctx, Tensor& d_h, const Tensor& d_out, const Tensor& h,
                                Region&& region) {
  SequenceParallelScratch& sp = *ctx.sequence_parallel;
  const int64_t N = sp.rows, C = h.dim(1);
  Tensor full = scratch_rows(sp.full, N, C), full_grad = scratch_rows(sp.full_grad, N, C);
  Tensor partial = scratch_rows(sp.partial, N, C);
  gather_from_sequence_parallel_region_forward(full, h, ctx.tp);
  reduce_scatter_to_sequence_parallel_region_backward(full_grad, d_out, ctx.tp);
  partial.fill_zero();
  if (ctx.tp_async == nullptr || ctx.tp.size() == 1) {
    region(partial, full_grad, full, std::function<void()>{});
    gather_from_sequence_parallel_region_backward(d_h, partial, ctx.tp);
    return;
  }
  QueuedOp scatter(*ctx.tp_async,
                   [&d_h, &partial](Communicator& c) { gather_from_sequence_parallel_region_backward(d_h, partial, c); });
  region(partial, full_grad, full, std::function<void()>([&scatter] { scatter.start(); }));
  if (!scatter.started()) scatter.start();  // a region without the hook: in line after it
  scatter.finish();
}

}  // namespace

int64_t activation_bytes(const LayerActs& a) {
  int64_t n = 0;
  auto add = [&](std::initializer_list<const Tensor*> ts) {
    for (const Tensor* t : ts) n += t->defined() ? t->nbytes() : 0;
  };
  auto add_vec = [&](const auto& v) { n += int64_t(v.size() * sizeof(v[0])); };
  add({&a.h1, &a.mean1, &a.rstd1, &a.x_mid, &a.h2, &a.mean2, &a.rstd2, &a.attn_out, &a.rstd_post_attn, &a.mlp_out,
       &a.rstd_post_mlp});
  const AttentionActs& at = a.attn;
  add({&at.qkv, &at.q, &at.k, &at.v, &at.att, &at.lse, &at.q_rstd, &at.k_rstd});
  add({&a.mlp.pre, &a.mlp.h});
  const MoeActs& m = a.moe;
  add({&m.probs, &m.sent_x, &m.recv_x, &m.expert_x, &m.expert_y, &m.recv_y, &m.slot_y, &m.shared_y, &m.shared_gate,
       &m.shared_acts.pre, &m.shared_acts.h});
  for (const MlpActs& e : m.expert_acts) add({&e.pre, &e.h});
  add_vec(m.chosen), add_vec(m.weight), add_vec(m.send_slot), add_vec(m.lse);
  return n;
}

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
    attention_forward(ctx, attn_out, h1, rows, a);
    post_attn_norm_->forward(x_mid.data<float>(), nullptr, scratch_rows(a.rstd_post_attn, N, 1).data<float>(),
                             attn_out.data<float>(), N);
  } else {
    attention_forward(ctx, x_mid, h1, rows, a);
  }
  add_arrays(x_mid.data<float>(), x_mid.data<float>(), x.data<float>(), N * C);
  norm2_.forward(h2.data<float>(), mean2.data<float>(), rstd2.data<float>(), x_mid.data<float>(), N);
  if (post_mlp_norm_) {
    Tensor mlp_out = scratch_rows(a.mlp_out, N, C);
    ffn_forward(ctx, mlp_out, h2, a);
    post_mlp_norm_->forward(out.data<float>(), nullptr, scratch_rows(a.rstd_post_mlp, N, 1).data<float>(),
                            mlp_out.data<float>(), N);
  } else {
    ffn_forward(ctx, out, h2, a);
  }
  add_arrays(out.data<float>(), x_mid.data<float>(), out.data<float>(), N * C);
}

void TransformerLayer::backward(const LayerContext& ctx, Tensor& d_x, Tensor& d_h, const Tensor& x,
                                const AttentionRows& rows, const LayerActs& a) {
  const int64_t N = x.dim(0);
  TP_CHECK(d_x.shape() == x.shape() && d_h.shape() == x.shape() && a.h1.ndim() == 2 && a.h1.dim(0) >= N,
           "[TransformerLayer::backward] d_x ", d_x.describe(), ", d_h ", d_h.describe(), ", x ", x.describe(),
           ": expected one (N, C) shape and the forward's activations");
  const Tensor h1 = a.h1.slice(0, 0, N), x_mid = a.x_mid.slice(0, 0, N), h2 = a.h2.slice(0, 0, N);
  std::optional<NormGradsOverTp> sp_norm_grads;  // the norms saw this rank's rows only
  if (ctx.sequence_parallel) {
    std::vector<Norm*> norms{&norm1_, &norm2_};
    if (post_attn_norm_) norms.insert(norms.end(), {&*post_attn_norm_, &*post_mlp_norm_});
    sp_norm_grads.emplace(std::move(norms));
  }
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
  attention_backward(ctx, d_h, post_attn_norm_ ? d_post : d_x, h1, rows, a);
  norm1_.backward(d_x.data<float>(), d_h.data<float>(), x.data<float>(), a.mean1.data<float>(),
                  a.rstd1.data<float>(), N);
  if (sp_norm_grads) sp_norm_grads->sum(ctx.tp);
}

void TransformerLayer::attention_forward(const LayerContext& ctx, Tensor& out, const Tensor& h,
                                         const AttentionRows& rows, LayerActs& a) const {
  if (!ctx.sequence_parallel) {
    attn_.forward(ctx.eng, out, h, rows, a.attn, ctx.tp);
    return;
  }
  sequence_parallel_forward(ctx, out, h, [&](Tensor& partial, const Tensor& full) {
    attn_.forward_partial(ctx.eng, partial, full, rows, a.attn);
  });
  attn_.o().add_bias(out);
}

void TransformerLayer::attention_backward(const LayerContext& ctx, Tensor& d_h, const Tensor& d_out, const Tensor& h,
                                          const AttentionRows& rows, const LayerActs& a) {
  if (!ctx.sequence_parallel) {
    attn_.backward(ctx.eng, d_h, d_out, h, rows, a.attn, ctx.tp, ctx.kv_group, ctx.tp_async);
    return;
  }
  sequence_parallel_backward(ctx, d_h, d_out, h,
                             [&](Tensor& d_full, const Tensor& d_out_full, const Tensor& full,
                                 const std::function<void()>& input_done) {
                               attn_.backward_partial(ctx.eng, d_full, d_out_full, full, rows, a.attn, ctx.tp,
                                                      ctx.kv_group, input_done);
                             });
}

void TransformerLayer::ffn_forward(const LayerContext& ctx, Tensor& out, const Tensor& h, LayerActs& a) const {
  if (moe_ && !ctx.sequence_parallel) {
    moe_->forward(ctx.eng, out, h, a.moe, ctx.tp, ctx.ep_dispatch, ctx.moe_capacity_factor);
  } else if (moe_) {
    // Every TP rank routes all of the micro-batch's tokens (gathered), as without SP; each
    // rank's expert slices give a Partial output, reduce-scattered to its rows.
    sequence_parallel_forward(ctx, out, h, [&](Tensor& partial, const Tensor& full) {
      moe_->forward_partial(ctx.eng, partial, full, a.moe, ctx.ep_dispatch, ctx.moe_capacity_factor);
    });
  } else if (!ctx.sequence_parallel) {
    mlp_->forward(ctx.eng, out, h, a.mlp, ctx.tp);
  } else {
    sequence_parallel_forward(ctx, out, h, [&](Tensor& partial, const Tensor& full) {
      mlp_->forward_partial(ctx.eng, partial, full, a.mlp);
    });
    mlp_->down().add_bias(out);
  }
}

void TransformerLayer::ffn_backward(const LayerContext& ctx, Tensor& d_h, const Tensor& d_out, const Tensor& h,
                                   const LayerActs& a) {
  if (moe_ && !ctx.sequence_parallel) {
    moe_->backward(ctx.eng, d_h, d_out, h, a.moe, ctx.moe_aux_dprob, ctx.moe_z_dlse, ctx.tp, ctx.ep_dispatch,
                   ctx.tp_async);
  } else if (moe_) {
    sequence_parallel_backward(ctx, d_h, d_out, h,
                               [&](Tensor& d_full, const Tensor& d_out_full, const Tensor& full,
                                   const std::function<void()>& /*input_done: not split*/) {
      moe_->backward_partial(ctx.eng, d_full, d_out_full, full, a.moe, ctx.moe_aux_dprob, ctx.moe_z_dlse, ctx.tp,
                             ctx.ep_dispatch);
    });
  } else if (!ctx.sequence_parallel) {
    mlp_->backward(ctx.eng, d_h, d_out, h, a.mlp, ctx.tp, ctx.tp_async);
  } else {
    sequence_parallel_backward(ctx, d_h, d_out, h,
                               [&](Tensor& d_full, const Tensor& d_out_full, const Tensor& full,
                                   const std::function<void()>& input_done) {
                                 mlp_->backward_partial(ctx.eng, d_full, d_out_full, full, a.mlp, input_done);
                               });
  }
}

}  // namespace tensorpar

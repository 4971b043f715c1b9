// Transformer training: forward saving activations, loss by vocab-parallel cross-entropy (the
// logits are never gathered), backward through every layer, parameters and initialisation.
// Replicated parameters (norms, GPT-2 positions and row-parallel biases) get gradients computed
// from Replicated activations and gradients, so they are already identical on every TP rank.
#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"
#include "model/transformer_state.h"
#include "parallel/mappings.h"
#include "parallel/rng.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace tensorpar {

namespace {

// out = a + b elementwise (out may alias either).
void add(Tensor& out, const Tensor& a, const Tensor& b) {
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  for (int64_t i = 0; i < out.numel(); ++i) po[i] = pa[i] + pb[i];
}

}  // namespace

void Transformer::norm_backward(float* d_in, float* d_out, const float* in, Param& w, Param& b, const float* mean,
                                const float* rstd, int64_t N) {
  const int64_t C = config_.hidden;
  ensure_grad(w.grad, {C});
  if (config_.family == ArchFamily::kGpt2) {
    ensure_grad(b.grad, {C});
    layernorm_backward(d_in, w.grad.data<float>(), b.grad.data<float>(), d_out, in, w.value.data<float>(), mean,
                       rstd, N, C);
  } else {
    rmsnorm_backward(d_in, w.grad.data<float>(), d_out, in, w.value.data<float>(), rstd, N, C);
  }
}

void Transformer::layer_forward_train(TransformerLayer& L, TrainLayerActs& A, Tensor& out, int64_t B, int64_t T,
                                      const int64_t* positions) {
  const int64_t N = B * T, C = config_.hidden;
  const bool ln = config_.family == ArchFamily::kGpt2;
  ensure_f32(A.h1, {N, C}), ensure_f32(A.rstd1, {N}), ensure_f32(A.mean1, {N});
  norm_forward(A.h1.data<float>(), ln ? A.mean1.data<float>() : nullptr, A.rstd1.data<float>(),
               A.x_in.data<float>(), L.norm1_w, L.norm1_b, N);
  L.attn->forward_train(eng_, out, A.h1, B, T, positions, A.attn, tp_);  // out = attn(norm1(x))
  ensure_f32(A.x_mid, {N, C});
  add(A.x_mid, A.x_in, out);
  ensure_f32(A.h2, {N, C}), ensure_f32(A.rstd2, {N}), ensure_f32(A.mean2, {N});
  norm_forward(A.h2.data<float>(), ln ? A.mean2.data<float>() : nullptr, A.rstd2.data<float>(),
               A.x_mid.data<float>(), L.norm2_w, L.norm2_b, N);
  L.mlp->forward(eng_, out, A.h2, A.mlp, tp_);
  add(out, A.x_mid, out);
}

void Transformer::set_train_compute(const TrainCompute& compute) {
  TP_CHECK(compute.recompute_layers >= 0, "[Transformer::set_train_compute] recompute_layers: got ",
           compute.recompute_layers, ", expected >= 0");
  TP_CHECK(compute.matmul_dtype == DType::kF32 || compute.matmul_dtype == DType::kBF16,
           "[Transformer::set_train_compute] matmul dtype: got ", dtype_name(compute.matmul_dtype),
           ", expected f32 or bf16");
  compute_ = compute;
  train_->invalidate();
}

float Transformer::train_step(const Tensor& tokens, const Tensor& targets, float loss_scale, bool with_grad) {
  TP_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::kI64 && targets.shape() == tokens.shape() &&
               targets.dtype() == DType::kI64 && tokens.is_contiguous() && targets.is_contiguous(),
           "[Transformer::forward_backward] tokens ", tokens.describe(), ", targets ", targets.describe(),
           ": expected i64 (B, T), both the same shape");
  TP_CHECK(embed_.value.dtype() == DType::kF32, "[Transformer::forward_backward] training needs f32 weights; the ",
           "embedding is ", dtype_name(embed_.value.dtype()), " (load with float weights, not quantized)");
  const int64_t B = tokens.dim(0), T = tokens.dim(1), N = B * T, C = config_.hidden;
  TP_CHECK(N >= 1, "[Transformer::forward_backward] empty batch");
  TrainState& s = *train_;
  s.positions.resize(size_t(N));
  for (int64_t i = 0; i < N; ++i) s.positions[size_t(i)] = i % T;
  const int64_t* ids = tokens.data<int64_t>();
  const int64_t* pos = s.positions.data();
  const bool ln = config_.family == ArchFamily::kGpt2;
  // bf16 compute applies to this step's matmuls only (inference keeps the engine's f32).
  struct ComputeScope {
    MatmulEngine& eng;
    ~ComputeScope() { eng.set_compute_dtype(DType::kF32); }
  } scope{eng_};
  eng_.set_compute_dtype(compute_.matmul_dtype);

  // Layer l's output is layer l+1's saved input (the last one's is x_out). A recomputed layer
  // (and every layer without backward) runs with the shared `recomputed` activations and keeps
  // only x_in.
  const int64_t n_layers = int64_t(layers_.size());
  auto recomputes = [&](int64_t l) { return !with_grad || l < compute_.recompute_layers; };
  s.layers.resize(layers_.size());
  Tensor& x0 = n_layers > 0 ? s.layers[0].x_in : s.x_out;
  ensure_f32(x0, {N, C});
  embed(x0, ids, pos, N);
  for (int64_t l = 0; l < n_layers; ++l) {
    TrainLayerActs& saved = s.layers[size_t(l)];
    Tensor& out = l + 1 < n_layers ? s.layers[size_t(l) + 1].x_in : s.x_out;
    ensure_f32(out, {N, C});
    if (recomputes(l)) s.recomputed.x_in = saved.x_in;
    if (recomputes(l) && with_grad) {
      saved = TrainLayerActs{};  // drops what an earlier step saved here (an evaluation keeps it)
      saved.x_in = s.recomputed.x_in;
    }
    layer_forward_train(layers_[size_t(l)], recomputes(l) ? s.recomputed : saved, out, B, T, pos);
  }
  ensure_f32(s.hf, {N, C}), ensure_f32(s.rstdf, {N}), ensure_f32(s.meanf, {N});
  norm_forward(s.hf.data<float>(), ln ? s.meanf.data<float>() : nullptr, s.rstdf.data<float>(),
               s.x_out.data<float>(), norm_w_, norm_b_, N);
  Param& head = config_.tie_embeddings ? embed_ : lm_head_;
  ensure_f32(s.logits, {N, vocab_range_.size()});
  if (s.logits.numel() > 0) matmul_forward(eng_, s.logits, s.hf, head.value, nullptr);
  ensure_f32(s.lse, {N});
  Tensor tg = targets.reshape({N});
  const float loss = vocab_parallel_cross_entropy_forward(nullptr, s.lse, s.logits, tg, vocab_range_,
                                                          config_.vocab_size, tp_);
  if (!with_grad) return loss;

  // ---- backward ----
  Tensor& d_logits = s.d_logits;
  ensure_f32(d_logits, s.logits.shape());
  d_logits.fill_zero();
  vocab_parallel_cross_entropy_backward(d_logits, loss_scale, s.logits, s.lse, tg, vocab_range_, config_.vocab_size);
  ensure_grad(head.grad, head.value.shape());
  Tensor& d_h = s.d_h;
  ensure_f32(d_h, {N, C});
  d_h.fill_zero();
  if (d_logits.numel() > 0) matmul_backward(eng_, &d_h, &head.grad, nullptr, d_logits, s.hf, head.value);
  copy_to_tp_region_backward(d_h, tp_);  // the LM head's input gradient is Partial over the vocab
  Tensor& d_x = s.d_x;
  ensure_f32(d_x, {N, C});
  d_x.fill_zero();
  norm_backward(d_x.data<float>(), d_h.data<float>(), s.x_out.data<float>(), norm_w_, norm_b_, s.meanf.data<float>(),
                s.rstdf.data<float>(), N);
  for (size_t li = layers_.size(); li-- > 0;) {
    TransformerLayer& L = layers_[li];
    TrainLayerActs& A = recomputes(int64_t(li)) ? s.recomputed : s.layers[li];
    if (recomputes(int64_t(li))) {
      A.x_in = s.layers[li].x_in;
      layer_forward_train(L, A, d_h, B, T, pos);  // d_h is free here: its value is not needed
    }
    // x_out = x_mid + mlp(norm2(x_mid)): d_x flows to x_mid directly and through the MLP.
    L.mlp->backward(eng_, d_h, d_x, A.h2, A.mlp, tp_);
    norm_backward(d_x.data<float>(), d_h.data<float>(), A.x_mid.data<float>(), L.norm2_w, L.norm2_b,
                  A.mean2.data<float>(), A.rstd2.data<float>(), N);
    L.attn->backward(eng_, d_h, d_x, A.h1, B, T, pos, A.attn, tp_, kv_group_.get());
    norm_backward(d_x.data<float>(), d_h.data<float>(), A.x_in.data<float>(), L.norm1_w, L.norm1_b,
                  A.mean1.data<float>(), A.rstd1.data<float>(), N);
  }
  ensure_grad(embed_.grad, embed_.value.shape());
  embedding_backward_masked(embed_.grad.data<float>(), d_x.data<float>(), ids, N, vocab_range_.begin,
                            vocab_range_.end, C);
  if (ln) {
    ensure_grad(pos_embed_.grad, pos_embed_.value.shape());
    float* g = pos_embed_.grad.data<float>();
    const float* d = d_x.data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < C; ++i) g[pos[n] * C + i] += d[n * C + i];
  }
  return loss;
}

float Transformer::forward_backward(const Tensor& tokens, const Tensor& targets, float loss_scale) {
  return train_step(tokens, targets, loss_scale, true);
}

float Transformer::forward_loss(const Tensor& tokens, const Tensor& targets) {
  return train_step(tokens, targets, 0.0f, false);
}

void Transformer::append_param(std::vector<ParamShard>& out, const std::string& name, Tensor& value, Tensor& grad,
                               Shape global, int dim, Range range, int copies) {
  ParamShard p;
  p.name = name;
  p.value = &value;
  if (!dtype_is_quantized(value.dtype())) {
    ensure_grad(grad, value.shape());
    p.grad = &grad;
  }
  p.global_shape = std::move(global);
  p.shard_dim = dim;
  p.range = range;
  p.copies = copies;
  out.push_back(std::move(p));
}

std::vector<ParamShard> Transformer::parameters() {
  return config_.family == ArchFamily::kGpt2 ? parameters_gpt2() : parameters_llama();
}

void Transformer::zero_grad() {
  for (ParamShard& p : parameters())
    if (p.grad && p.grad->numel() > 0) p.grad->fill_zero();
}

void Transformer::init_weights(uint64_t seed) {
  const float stddev = 0.02f, out_stddev = 0.02f / std::sqrt(2.0f * float(config_.n_layers));
  auto ends_with = [](const std::string& s, const char* suffix) {
    const std::string x(suffix);
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  for (ParamShard& p : parameters()) {
    Tensor& v = *p.value;
    v = Tensor::empty(v.shape(), DType::kF32);  // quantized or bf16 weights become f32
    const bool is_norm = p.name.find("norm") != std::string::npos || p.name.find(".ln_") != std::string::npos;
    if (is_norm) {
      v.fill(ends_with(p.name, ".weight") ? 1.0f : 0.0f);
    } else if (p.global_shape.size() == 1) {
      v.fill_zero();  // biases
    } else {
      const bool out_proj = p.name.find("o_proj") != std::string::npos || p.name.find("down_proj") != std::string::npos ||
                            p.name.find("c_proj") != std::string::npos;
      const int dim = p.shard_dim < 0 ? 0 : p.shard_dim;
      const Range r = p.shard_dim < 0 ? Range{0, p.global_shape[0]} : p.range;
      init_normal_sliced(v, p.global_shape, dim, r, out_proj ? out_stddev : stddev, seed, tensor_id_of(p.name));
    }
    if (p.grad) *p.grad = Tensor();
  }
  train_->invalidate();
}

}  // namespace tensorpar

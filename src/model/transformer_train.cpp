// Transformer training: the same layer forward as inference with dense rows, keeping what
// backward needs; loss by vocab-parallel cross-entropy (the logits are never gathered); backward
// through every layer; parameters and initialisation. Replicated parameters (norms, GPT-2
// positions and row-parallel biases) get gradients computed from Replicated activations and
// gradients, so they are already identical on every TP rank.
#include <cmath>
#include <cstring>
#include <optional>

#include "core/error.h"
#include "model/transformer_state.h"
#include "parallel/mappings.h"
#include "parallel/rng.h"
#include "parallel/vocab_parallel_cross_entropy.h"

namespace tensorpar {

void Transformer::set_train_compute(const TrainCompute& compute) {
  TP_CHECK(compute.recompute_layers >= 0, "[Transformer::set_train_compute] recompute_layers: got ",
           compute.recompute_layers, ", expected >= 0");
  TP_CHECK(compute.matmul_dtype == DType::kF32 || compute.matmul_dtype == DType::kBF16,
           "[Transformer::set_train_compute] matmul dtype: got ", dtype_name(compute.matmul_dtype),
           ", expected f32 or bf16");
  compute_ = compute;
  if (compute.overlap_tp_backward && tp_.size() > 1 && !tp_async_) tp_async_ = std::make_unique<CommThread>(tp_);
  train_->invalidate();
  stage_micro_.clear();
}

int64_t Transformer::activation_bytes() const {
  auto bytes = [](std::initializer_list<const Tensor*> ts) {
    int64_t n = 0;
    for (const Tensor* t : ts) n += t->defined() ? t->nbytes() : 0;
    return n;
  };
  auto state_bytes = [&](const TrainState& s) {
    int64_t n = bytes({&s.hf, &s.meanf, &s.rstdf, &s.logits, &s.lse, &s.d_logits, &s.d_h, &s.d_x}) +
                tensorpar::activation_bytes(s.recomputed);
    for (const Tensor& t : s.inputs) n += bytes({&t});
    for (const LayerActs& a : s.layers) n += tensorpar::activation_bytes(a);
    return n;
  };
  const SequenceParallelScratch& sp = scratch_->sp;
  int64_t n = state_bytes(*train_) + bytes({&sp.full, &sp.full_grad, &sp.partial});
  for (const auto& [micro, s] : stage_micro_) n += state_bytes(*s);
  if (owns_stage_spare_)
    for (const auto& s : *stage_spare_) n += state_bytes(*s);
  return n;
}

void Transformer::share_stage_states(Transformer& owner) {
  TP_CHECK(stage_micro_.empty() && stage_spare_->empty(), "[Transformer::share_stage_states] layers [", span_.first,
           ", ", span_.last, ") already hold activations");
  TP_CHECK(&owner != this && owner.owns_stage_spare_, "[Transformer::share_stage_states] the owner must be another "
           "model with a pool of its own");
  stage_spare_ = owner.stage_spare_;
  owns_stage_spare_ = false;
}

float Transformer::train_step(const Tensor& tokens, const Tensor& targets, float loss_scale, bool with_grad) {
  check_whole_model("Transformer::forward_backward");
  TrainState& s = *train_;
  const float loss = span_forward(s, tokens, nullptr, targets, nullptr, with_grad, "Transformer::forward_backward");
  if (with_grad) span_backward(s, nullptr, loss_scale, nullptr);
  return loss;
}

namespace {

// bf16 compute applies to a training step's matmuls only (inference keeps the engine's f32).
class TrainComputeScope {
 public:
  TrainComputeScope(MatmulEngine& eng, DType dtype) : eng_(eng) { eng_.set_compute_dtype(dtype); }
  ~TrainComputeScope() { eng_.set_compute_dtype(DType::kF32); }
  TrainComputeScope(const TrainComputeScope&) = delete;
  TrainComputeScope& operator=(const TrainComputeScope&) = delete;

 private:
  MatmulEngine& eng_;
};

// The dense attention rows of a step's B sequences of T tokens from position 0.
AttentionRows dense_rows(const std::vector<int64_t>& positions, int64_t B, int64_t T) {
  AttentionRows rows;
  rows.positions = positions.data();
  rows.B = B, rows.T = T;
  return rows;
}

}  // namespace

float Transformer::span_forward(TrainState& s, const Tensor& tokens, const Tensor* x_in, const Tensor& targets,
                                Tensor* x_out, bool with_grad, const char* where) {
  TP_CHECK(tokens.ndim() == 2 && tokens.dtype() == DType::kI64 && tokens.is_contiguous() &&
               (!span_.head || (targets.shape() == tokens.shape() && targets.dtype() == DType::kI64 &&
                                targets.is_contiguous())),
           "[", where, "] tokens ", tokens.describe(), ", targets ", targets.describe(),
           ": expected i64 (B, T), both the same shape");
  const int64_t B = tokens.dim(0), T = tokens.dim(1), N = B * T, C = config_.hidden;
  TP_CHECK(N >= 1, "[", where, "] empty batch");
  // Under sequence parallelism the residual stream holds this rank's Nl rows of the N.
  const bool sp = compute_.sequence_parallel;
  const int64_t Nl = stage_rows(N);
  TP_CHECK(span_.embedding || (x_in && x_in->shape() == (Shape{Nl, C}) && x_in->dtype() == DType::kF32),
           "[", where, "] a stage without the embedding needs its input activations f32", shape_str({Nl, C}),
           ", got ", x_in ? x_in->describe() : std::string("none"), " (layers [", span_.first, ", ", span_.last,
           "), tp rank ", tp_.rank(), ")");
  TP_CHECK(span_.head || x_out, "[", where, "] a stage without the head needs an output tensor");
  TP_CHECK(!with_grad || !embed_ || embed_->weight().dtype() == DType::kF32, "[", where, "] training needs ",
           "f32 weights; the embedding is ", dtype_name(embed_ ? embed_->weight().dtype() : DType::kF32),
           " (load with float weights, not quantized)");
  s.B = B, s.T = T, s.with_grad = with_grad;
  s.positions.resize(size_t(N));
  for (int64_t i = 0; i < N; ++i) s.positions[size_t(i)] = i % T;
  s.ids.assign(tokens.data<int64_t>(), tokens.data<int64_t>() + N);
  const AttentionRows rows = dense_rows(s.positions, s.B, s.T);
  LayerContext ctx{eng_, tp_, kv_group_.get(), ep_.dispatch};
  ctx.moe_capacity_factor = compute_.moe_capacity_factor;
  TrainScratch& ts = *scratch_;
  ts.sp.rows = N;
  if (sp) ctx.sequence_parallel = &ts.sp;
  const TrainComputeScope scope(eng_, compute_.matmul_dtype);

  // inputs[l] is local layer l's input, inputs[L] the span's output. A recomputed layer (and
  // every layer without backward) writes the shared `recomputed` activations; only its input
  // stays. Recomputation counts the model's layers from 0, whichever stage holds them.
  const int64_t L = int64_t(layers_.size());
  auto recomputes = [&](int64_t l) { return !with_grad || span_.first + l < compute_.recompute_layers; };
  s.inputs.resize(size_t(L + 1));
  s.layers.resize(size_t(L));
  for (Tensor& x : s.inputs) ensure_f32(x, {Nl, C});
  if (span_.embedding && sp) {
    ensure_f32(ts.sp.full_grad, {N, C});
    embed(ts.sp.full_grad, s.ids.data(), s.positions.data(), N);
    scatter_to_sequence_parallel_region_forward(s.inputs[0], ts.sp.full_grad, tp_);
  } else if (span_.embedding) {
    embed(s.inputs[0], s.ids.data(), s.positions.data(), N);
  } else {
    std::memcpy(s.inputs[0].data<float>(), x_in->data<float>(), size_t(Nl * C) * sizeof(float));
  }
  const int64_t E = config_.moe.n_experts;
  std::vector<double> moe_count(size_t(E), 0.0), moe_prob(size_t(E), 0.0);
  double lse_sq = 0;
  expert_load_.clear();
  for (int64_t l = 0; l < L; ++l) {
    if (recomputes(l) && with_grad) s.layers[size_t(l)] = LayerActs{};  // drop what an earlier step saved
    LayerActs& acts = recomputes(l) ? s.recomputed : s.layers[size_t(l)];
    layers_[size_t(l)].forward(ctx, s.inputs[size_t(l + 1)], s.inputs[size_t(l)], rows, acts);
    if (!layers_[size_t(l)].is_moe()) continue;
    expert_load_.push_back(acts.moe.expert_count);
    for (int64_t e = 0; e < E; ++e)
      moe_count[size_t(e)] += acts.moe.expert_count[size_t(e)], moe_prob[size_t(e)] += acts.moe.prob_sum[size_t(e)];
    lse_sq += acts.moe.lse_sq_sum;
  }
  const float aux = moe_aux_loss(s, moe_count, moe_prob, N, where);
  // The router z-loss over the M = (MoE layers x N) router outputs: coef * sum(lse^2) / M, whose
  // gradient on a token's lse is coef * 2 lse / M.
  const double M = double(expert_load_.size()) * double(N);
  TP_CHECK(compute_.moe_z_loss_coef == 0 || M == 0 || (span_.first == 0 && span_.last == config_.n_layers), "[",
           where, "] the router z-loss spans all layers; this rank holds layers [", span_.first, ", ", span_.last,
           ") of a pipeline: pass --moe-z-loss-coef 0 with pipeline stages");
  s.z_dlse = M > 0 ? float(2.0 * compute_.moe_z_loss_coef / M) : 0.0f;
  const float z_loss = M > 0 ? float(compute_.moe_z_loss_coef * lse_sq / M) : 0.0f;
  const Tensor& x_last = s.inputs[size_t(L)];
  if (!span_.head) {
    ensure_f32(*x_out, {Nl, C});
    std::memcpy(x_out->data<float>(), x_last.data<float>(), size_t(Nl * C) * sizeof(float));
    return 0.0f;
  }
  ensure_f32(s.hf, {Nl, C}), ensure_f32(s.rstdf, {Nl}), ensure_f32(s.meanf, {Nl});
  final_norm_->forward(s.hf.data<float>(), s.meanf.data<float>(), s.rstdf.data<float>(), x_last.data<float>(), Nl);
  if (sp) {
    ensure_f32(ts.sp.full, {N, C});
    gather_from_sequence_parallel_region_forward(ts.sp.full, s.hf, tp_);
  }
  ensure_f32(s.logits, {N, vocab_range_.size()});
  if (s.logits.numel() > 0) matmul_forward(eng_, s.logits, sp ? ts.sp.full : s.hf, head_weight(), nullptr);
  softcap_logits(s.logits);
  ensure_f32(s.lse, {N});
  s.targets = targets.reshape({N});
  return vocab_parallel_cross_entropy_forward(nullptr, s.lse, s.logits, s.targets, vocab_range_, config_.vocab_size,
                                              tp_) +
         aux + z_loss;
}

float Transformer::moe_aux_loss(TrainState& s, const std::vector<double>& count, const std::vector<double>& prob,
                                int64_t N, const char* where) {
  s.aux_dprob.clear();
  const double coef = compute_.moe_aux_loss_coef < 0 ? config_.moe.aux_loss_coef : compute_.moe_aux_loss_coef;
  const int64_t moe_layers = int64_t(expert_load_.size()), E = config_.moe.n_experts;
  if (moe_layers == 0 || coef == 0) return 0.0f;
  // transformers' load_balancing_loss_func: over the M = (MoE layers x N tokens) router outputs
  // taken together, f_e = (top-k slots routed to e) / M and P_e = (sum of e's probability) / M;
  // aux = E * sum_e f_e P_e. Only P carries a gradient: d aux / d p(l, n, e) = E f_e / M.
  TP_CHECK(span_.first == 0 && span_.last == config_.n_layers, "[", where, "] the MoE auxiliary loss spans all ",
           "layers; this rank holds layers [", span_.first, ", ", span_.last,
           ") of a pipeline: pass --moe-aux-loss-coef 0 with pipeline stages");
  const double M = double(moe_layers * N);
  double aux = 0;
  s.aux_dprob.resize(size_t(E));
  for (int64_t e = 0; e < E; ++e) {
    const double f = count[size_t(e)] / M;
    aux += f * prob[size_t(e)] / M;
    s.aux_dprob[size_t(e)] = float(coef * double(E) * f / M);
  }
  return float(coef * double(E) * aux);
}

void Transformer::span_backward(TrainState& s, const Tensor* d_out, float loss_scale, Tensor* d_in) {
  TP_ASSERT(s.with_grad, "span_backward without a forward that kept its activations");
  const int64_t B = s.B, T = s.T, N = B * T, C = config_.hidden, L = int64_t(layers_.size());
  const bool sp = compute_.sequence_parallel;
  const int64_t Nl = stage_rows(N);
  const AttentionRows rows = dense_rows(s.positions, s.B, s.T);
  s.aux_dprob_scaled.resize(s.aux_dprob.size());
  for (size_t e = 0; e < s.aux_dprob.size(); ++e) s.aux_dprob_scaled[e] = s.aux_dprob[e] * loss_scale;
  LayerContext ctx{eng_, tp_, kv_group_.get(), ep_.dispatch, s.aux_dprob_scaled, s.z_dlse * loss_scale,
                   compute_.moe_capacity_factor};
  TrainScratch& ts = *scratch_;
  ts.sp.rows = N;
  if (sp) ctx.sequence_parallel = &ts.sp;
  if (compute_.overlap_tp_backward) ctx.tp_async = tp_async_.get();
  const TrainComputeScope scope(eng_, compute_.matmul_dtype);
  auto recomputes = [&](int64_t l) { return span_.first + l < compute_.recompute_layers; };
  Tensor& d_h = s.d_h;
  ensure_f32(d_h, {Nl, C});
  Tensor& d_x = s.d_x;
  ensure_f32(d_x, {Nl, C});
  if (span_.head) {
    Tensor& d_logits = s.d_logits;
    ensure_f32(d_logits, s.logits.shape());
    d_logits.fill_zero();
    vocab_parallel_cross_entropy_backward(d_logits, loss_scale, s.logits, s.lse, s.targets, vocab_range_,
                                          config_.vocab_size);
    softcap_logits_backward(d_logits, s.logits);
    // The LM head's input gradient is Partial over the vocab: summed over tp (all-reduce), or
    // under sequence parallelism summed into this rank's rows (reduce-scatter).
    Tensor& d_head_in = sp ? ts.sp.full_grad : d_h;
    ensure_f32(d_head_in, {N, C});
    d_head_in.fill_zero();
    if (sp) {  // the head's input again: only this rank's rows were kept
      ensure_f32(ts.sp.full, {N, C});
      gather_from_sequence_parallel_region_forward(ts.sp.full, s.hf, tp_);
    }
    if (d_logits.numel() > 0)
      matmul_backward(eng_, &d_head_in, &head_grad(), nullptr, d_logits, sp ? ts.sp.full : s.hf, head_weight());
    if (sp)
      gather_from_sequence_parallel_region_backward(d_h, d_head_in, tp_);
    else
      copy_to_tp_region_backward(d_h, tp_);
    d_x.fill_zero();
    std::optional<NormGradsOverTp> norm_grads;
    if (sp) norm_grads.emplace(std::vector<Norm*>{final_norm_.get()});
    final_norm_->backward(d_x.data<float>(), d_h.data<float>(), s.inputs[size_t(L)].data<float>(),
                          s.meanf.data<float>(), s.rstdf.data<float>(), Nl);
    if (norm_grads) norm_grads->sum(tp_);
    gradients_done(kHeadGrads);
  } else {
    TP_CHECK(d_out && d_out->shape() == (Shape{Nl, C}) && d_out->dtype() == DType::kF32,
             "[Transformer::stage_backward] a stage without the head needs its output's gradient f32",
             shape_str({Nl, C}), ", got ", d_out ? d_out->describe() : std::string("none"));
    std::memcpy(d_x.data<float>(), d_out->data<float>(), size_t(Nl * C) * sizeof(float));
  }
  for (int64_t l = L; l-- > 0;) {
    const Tensor& x = s.inputs[size_t(l)];
    if (recomputes(l))  // d_h is free here: its value is not needed
      layers_[size_t(l)].forward(ctx, d_h, x, rows, s.recomputed);
    layers_[size_t(l)].backward(ctx, d_x, d_h, x, rows, recomputes(l) ? s.recomputed : s.layers[size_t(l)]);
    gradients_done(span_.first + l);
  }
  if (!span_.embedding) {
    TP_CHECK(d_in, "[Transformer::stage_backward] a stage without the embedding needs an input-gradient tensor");
    ensure_f32(*d_in, {Nl, C});
    std::memcpy(d_in->data<float>(), d_x.data<float>(), size_t(Nl * C) * sizeof(float));
    gradients_done(kEndGrads);
    return;
  }
  Tensor& d_embedded = sp ? ts.sp.full_grad : d_x;  // every row's gradient, whichever rank holds the row
  if (sp) {
    ensure_f32(d_embedded, {N, C});
    scatter_to_sequence_parallel_region_backward(d_embedded, d_x, tp_);
  }
  embed_backward(d_embedded, s.ids.data(), N);
  if (config_.family == ArchFamily::kGpt2) {
    ensure_grad(pos_embed_.grad, pos_embed_.value.shape());
    float* g = pos_embed_.grad.data<float>();
    const float* d = d_embedded.data<float>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < C; ++i) g[s.positions[size_t(n)] * C + i] += d[n * C + i];
  }
  gradients_done(kEndGrads);
}

int64_t Transformer::stage_rows(int64_t N) const {
  return compute_.sequence_parallel ? partition_even(N, tp_.size(), tp_.rank()).size() : N;
}

float Transformer::stage_forward(int64_t micro, const Tensor& tokens, const Tensor* x_in, const Tensor& targets,
                                 Tensor* x_out, bool with_grad) {
  std::unique_ptr<TrainState>& s = stage_micro_[micro];
  TP_CHECK(!s, "[Transformer::stage_forward] micro-batch ", micro, " already holds activations (layers [",
           span_.first, ", ", span_.last, "))");
  if (!stage_spare_->empty()) {
    s = std::move(stage_spare_->back());
    stage_spare_->pop_back();
  } else {
    s = std::make_unique<TrainState>();
  }
  float loss = 0;
  try {
    loss = span_forward(*s, tokens, x_in, targets, x_out, with_grad, "Transformer::stage_forward");
  } catch (...) {
    stage_micro_.erase(micro);
    throw;
  }
  if (!with_grad) {
    stage_spare_->push_back(std::move(s));
    stage_micro_.erase(micro);
  }
  return loss;
}

void Transformer::stage_backward(int64_t micro, const Tensor* d_out, float loss_scale, Tensor* d_in) {
  auto it = stage_micro_.find(micro);
  TP_CHECK(it != stage_micro_.end(), "[Transformer::stage_backward] micro-batch ", micro,
           " has no activations: run stage_forward with grad first (layers [", span_.first, ", ", span_.last, "))");
  std::unique_ptr<TrainState> s = std::move(it->second);
  stage_micro_.erase(it);
  span_backward(*s, d_out, loss_scale, d_in);
  stage_spare_->push_back(std::move(s));
}

std::vector<ParamShard> Transformer::tied_head_copy() {
  std::vector<ParamShard> out;
  if (span_.embedding || !span_.head || !config_.tie_embeddings) return out;
  const char* name = config_.family == ArchFamily::kGpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
  append_param(out, name, embed_->weight(), embed_->d_weight(), {config_.vocab_size, config_.hidden}, 0, vocab_range_);
  mark_grad_part(out, 0, kHeadGrads);  // the head's own gradient: complete with the head's backward
  return out;
}

void Transformer::mark_grad_part(std::vector<ParamShard>& out, size_t from, int64_t part) {
  for (size_t i = from; i < out.size(); ++i) out[i].grad_part = part;
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
  if (config_.family == ArchFamily::kGemma3) return parameters_gemma3();
  return config_.family == ArchFamily::kGpt2 ? parameters_gpt2() : parameters_llama();
}

void Transformer::zero_grad() {
  for (std::vector<ParamShard> ps : {parameters(), tied_head_copy()})
    for (ParamShard& p : ps)
      if (p.grad && p.grad->numel() > 0) p.grad->fill_zero();
}

void Transformer::init_weights(uint64_t seed) {
  const float stddev = 0.02f, out_stddev = 0.02f / std::sqrt(2.0f * float(config_.n_layers));
  auto ends_with = [](const std::string& s, const char* suffix) {
    const std::string x(suffix);
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  // Fused layers keep one f32 weight per layer so that their parts' views (the parameters)
  // share its storage; every value below is then written in place.
  for (TransformerLayer& l : layers_) {
    std::vector<ColumnParallelLinear*> fused{&l.attn().qkv()};
    if (l.is_moe()) {
      for (int64_t e = l.moe().local_experts().begin; e < l.moe().local_experts().end; ++e)
        fused.push_back(&l.moe().expert(e).in());
      if (l.moe().has_shared()) fused.push_back(&l.moe().shared().in());
    } else {
      fused.push_back(&l.mlp().in());
    }
    for (ColumnParallelLinear* lin : fused) {
      std::vector<uint64_t> ids(size_t(lin->n_parts()), 0);
      lin->init_normal(stddev, seed, ids);
    }
  }
  for (ParamShard& p : parameters()) {
    Tensor& v = *p.value;
    if (v.dtype() != DType::kF32) v = Tensor::empty(v.shape(), DType::kF32);  // unfused quantized or 16-bit
    const bool is_norm = p.name.find("norm") != std::string::npos || p.name.find(".ln_") != std::string::npos;
    if (is_norm) {
      v.fill(ends_with(p.name, ".weight") ? 1.0f - config_.norm_weight_offset : 0.0f);  // a multiplier of 1
    } else if (p.global_shape.size() == 1) {
      v.fill_zero();  // biases
    } else {
      const bool out_proj = p.name.find("o_proj") != std::string::npos || p.name.find("down_proj") != std::string::npos ||
                            p.name.find("c_proj") != std::string::npos;
      const int dim = p.shard_dim < 0 ? 0 : p.shard_dim;
      const Range r = p.shard_dim < 0 ? Range{0, p.global_shape[0]} : p.range;
      init_normal_sliced(v, p.global_shape, dim, r, out_proj ? out_stddev : stddev, seed, tensor_id_of(p.name));
    }
    if (p.grad) p.grad->fill_zero();
  }
  train_->invalidate();
}

}  // namespace tensorpar

// Transformer construction, KV cache and the inference forward (see transformer.h). Inference
// reuses a per-model workspace that only grows, so decoding allocates nothing per token.
#include "model/transformer.h"

#include <cstring>

#include "core/error.h"
#include "core/half.h"
#include "core/quant.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/rmsnorm.h"
#include "model/transformer_state.h"

namespace tensorpar {

// ---- KV cache ----

TransformerKvCache::TransformerKvCache(int64_t n_layers, int64_t capacity, int64_t kv_local, int64_t head_dim)
    : capacity_(capacity) {
  TP_CHECK(capacity >= 1, "[make_cache] max_tokens: got ", capacity, ", expected >= 1");
  for (int64_t l = 0; l < n_layers; ++l) {
    // At least one float so a rank without kv heads still has valid pointers.
    const int64_t n = std::max<int64_t>(1, capacity * kv_local * head_dim);
    k_.push_back(Tensor::zeros({n}, DType::kF32));
    v_.push_back(Tensor::zeros({n}, DType::kF32));
  }
}

void TransformerKvCache::truncate(int64_t length) {
  TP_CHECK(length >= 0 && length <= length_, "[KvCache::truncate] length: got ", length, ", expected in [0, ",
           length_, "]");
  length_ = length;
}

int64_t TransformerKvCache::bytes() const {
  int64_t n = 0;
  for (size_t i = 0; i < k_.size(); ++i) n += k_[i].nbytes() + v_[i].nbytes();
  return n;
}

// ---- construction ----

Transformer::Transformer(const ModelConfig& config, Communicator& tp, int64_t quant_align)
    : config_(config), tp_(tp), ws_(std::make_unique<Workspace>()), train_(std::make_unique<TrainState>()) {
  config_.validate(config_.model_type);
  const ModelConfig& c = config_;
  const int size = tp.size(), rank = tp.rank();
  const bool gpt2 = c.family == ArchFamily::kGpt2;
  vocab_range_ = tensorpar::vocab_range(c.vocab_size, size, rank);
  if (!gpt2) {
    RopeScaling sc;
    sc.type = c.rope.scaling;
    sc.factor = c.rope.factor;
    sc.low_freq_factor = c.rope.low_freq_factor;
    sc.high_freq_factor = c.rope.high_freq_factor;
    sc.original_max_position_embeddings = double(c.rope.original_max_position);
    rope_ = std::make_unique<RopeTable>(RopeTable::make(c.head_dim, c.rope.theta, c.rope.layout, sc));
  }
  AttentionShape as;
  as.hidden = c.hidden;
  as.n_heads = c.n_heads;
  as.n_kv_heads = c.n_kv_heads;
  as.head_dim = c.head_dim;
  as.qkv_bias = c.qkv_bias || gpt2;
  as.out_bias = gpt2;
  ffn_ranges_ = mlp_ffn_ranges(c.ffn, size, quant_align);
  const Shape vec{c.hidden};
  for (int64_t l = 0; l < c.n_layers; ++l) {
    TransformerLayer layer;
    layer.norm1_w.value = Tensor::empty(vec, DType::kF32);
    layer.norm1_w.value.fill(1.0f);
    layer.norm2_w.value = layer.norm1_w.value.clone();
    if (gpt2) {
      layer.norm1_b.value = Tensor::zeros(vec, DType::kF32);
      layer.norm2_b.value = Tensor::zeros(vec, DType::kF32);
    }
    layer.attn = std::make_unique<ParallelAttention>(as, rope_.get(), size, rank);
    layer.mlp = std::make_unique<ParallelMlp>(c.hidden, c.ffn, gpt2 ? MlpKind::kGeluTanh : MlpKind::kSwiGlu, gpt2,
                                              ffn_ranges_, rank);
    layers_.push_back(std::move(layer));
  }
  norm_w_.value = Tensor::empty(vec, DType::kF32);
  norm_w_.value.fill(1.0f);
  if (gpt2) norm_b_.value = Tensor::zeros(vec, DType::kF32);
  embed_.value = Tensor::zeros({vocab_range_.size(), c.hidden}, DType::kF32);
  if (!c.tie_embeddings) lm_head_.value = Tensor::zeros({vocab_range_.size(), c.hidden}, DType::kF32);
  if (gpt2) pos_embed_.value = Tensor::zeros({c.max_position, c.hidden}, DType::kF32);
  // Ranks that share a replicated kv head sum their k/v gradients in this group (collective
  // over tp, so every rank takes part; ranks without heads get a group of their own).
  if (size > c.n_kv_heads) {
    const HeadRange& h = layers_.empty() ? partition_heads(c.n_heads, c.n_kv_heads, size, rank)
                                         : layers_[0].attn->heads();
    kv_group_ = tp.split(h.kv.empty() ? int(c.n_kv_heads) + rank : int(h.kv.begin), rank);
  }
}

Transformer::~Transformer() = default;

std::unique_ptr<KvCache> Transformer::make_cache(int64_t max_tokens) const {
  TP_CHECK(config_.family != ArchFamily::kGpt2 || max_tokens <= config_.max_position, "[make_cache] max_tokens ",
           max_tokens, " exceeds the model's ", config_.max_position, " learned positions");
  const int64_t kv = layers_.empty() ? 0 : layers_[0].attn->kv_local();
  return std::make_unique<TransformerKvCache>(config_.n_layers, max_tokens, kv, config_.head_dim);
}

int64_t Transformer::weight_bytes() const {
  auto b = [](const Param& p) { return p.value.ndim() > 0 ? p.value.nbytes() : 0; };
  int64_t n = b(embed_) + b(pos_embed_) + b(lm_head_) + b(norm_w_) + b(norm_b_);
  for (const TransformerLayer& l : layers_)
    n += b(l.norm1_w) + b(l.norm1_b) + b(l.norm2_w) + b(l.norm2_b) + l.attn->weight_bytes() + l.mlp->weight_bytes();
  return n;
}

void Transformer::load_weights(const WeightSource& src) {
  if (config_.family == ArchFamily::kGpt2)
    load_gpt2(*this, src);
  else
    load_llama(*this, src);
  train_->invalidate();
}

// ---- shared pieces ----

void Transformer::embed(Tensor& x, const int64_t* ids, const int64_t* positions, int64_t N) const {
  const int64_t C = config_.hidden;
  const Tensor& table = embed_.value;
  const DType dt = table.dtype();
  const int64_t row_bytes = dtype_nbytes(dt, C);
  const auto* base = static_cast<const uint8_t*>(table.raw());
  float* out = x.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t id = ids[n];
    TP_CHECK(id >= 0 && id < config_.vocab_size, "[Transformer::forward] token id ", id, " at position ", n,
             " is outside the vocabulary [0, ", config_.vocab_size, ")");
    float* o = out + n * C;
    if (!vocab_range_.contains(id)) {
      std::memset(o, 0, size_t(C) * sizeof(float));
      continue;
    }
    const uint8_t* row = base + (id - vocab_range_.begin) * row_bytes;
    if (dt == DType::kF32) {
      std::memcpy(o, row, size_t(C) * sizeof(float));
    } else if (dt == DType::kBF16) {
      for (int64_t i = 0; i < C; ++i) o[i] = bf16_to_f32(reinterpret_cast<const bf16*>(row)[i]);
    } else if (dt == DType::kF16) {
      for (int64_t i = 0; i < C; ++i) o[i] = f16_to_f32(reinterpret_cast<const f16*>(row)[i]);
    } else {
      dequantize_row(o, row, dt, C);
    }
  }
  if (tp_.size() > 1) tp_.all_reduce(out, out, N * C, DType::kF32, ReduceOp::kSum);
  if (config_.family == ArchFamily::kGpt2) {
    const float* wpe = pos_embed_.value.data<float>();
    for (int64_t n = 0; n < N; ++n) {
      TP_CHECK(positions[n] >= 0 && positions[n] < config_.max_position, "[Transformer::forward] position ",
               positions[n], " exceeds the model's ", config_.max_position, " learned positions");
      const float* p = wpe + positions[n] * C;
      float* o = out + n * C;
      for (int64_t i = 0; i < C; ++i) o[i] += p[i];
    }
  }
}

void Transformer::norm_forward(float* out, float* mean, float* rstd, const float* in, const Param& w, const Param& b,
                               int64_t N) const {
  if (config_.family == ArchFamily::kGpt2)
    layernorm_forward(out, mean, rstd, in, w.value.data<float>(), b.value.data<float>(), N, config_.hidden,
                      float(config_.norm_eps));
  else
    rmsnorm_forward(out, rstd, in, w.value.data<float>(), N, config_.hidden, float(config_.norm_eps));
}

// ---- inference ----

void Transformer::forward(Tensor& logits_local, std::span<const int32_t> tokens, KvCache& cache_base,
                          bool last_only) {
  auto* cache = dynamic_cast<TransformerKvCache*>(&cache_base);
  TP_CHECK(cache != nullptr, "[Transformer::forward] the cache was not made by this model's make_cache");
  const int64_t T = int64_t(tokens.size()), C = config_.hidden, pos0 = cache->length();
  TP_CHECK(T >= 1, "[Transformer::forward] no tokens");
  TP_CHECK(pos0 + T <= cache->capacity(), "[Transformer::forward] ", T, " tokens at position ", pos0,
           " overflow the cache of ", cache->capacity(), " tokens");
  const int64_t rows = last_only ? 1 : T;
  TP_CHECK(logits_local.shape() == (Shape{rows, vocab_range_.size()}) && logits_local.dtype() == DType::kF32,
           "[Transformer::forward] logits_local: got ", logits_local.describe(), ", expected f32",
           shape_str({rows, vocab_range_.size()}), " (rank ", tp_.rank(), ")");
  Workspace& ws = *ws_;
  const int64_t NHl = layers_[0].attn->q_local();
  ws.reserve(T, C, NHl * config_.head_dim);
  for (int64_t t = 0; t < T; ++t) {
    ws.ids[size_t(t)] = tokens[size_t(t)];
    ws.positions[size_t(t)] = pos0 + t;
  }
  Tensor x = ws.x.slice(0, 0, T), h = ws.h.slice(0, 0, T), a = ws.a.slice(0, 0, T);
  embed(x, ws.ids.data(), ws.positions.data(), T);
  float* xp = x.data<float>();
  const float* ap = a.data<float>();
  auto residual = [&] {
    for (int64_t i = 0; i < T * C; ++i) xp[i] += ap[i];
  };
  for (size_t l = 0; l < layers_.size(); ++l) {
    TransformerLayer& L = layers_[l];
    norm_forward(h.data<float>(), nullptr, nullptr, xp, L.norm1_w, L.norm1_b, T);
    L.attn->forward_cached(eng_, a, h, ws.positions.data(), pos0, cache->k(int64_t(l)), cache->v(int64_t(l)),
                           cache->capacity(), ws.q.data<float>(), ws.att.data<float>(), tp_);
    residual();
    norm_forward(h.data<float>(), nullptr, nullptr, xp, L.norm2_w, L.norm2_b, T);
    L.mlp->forward(eng_, a, h, ws.mlp, tp_);
    residual();
  }
  Tensor hr = h.slice(0, T - rows, T);
  norm_forward(hr.data<float>(), nullptr, nullptr, xp + (T - rows) * C, norm_w_, norm_b_, rows);
  if (logits_local.numel() > 0)
    matmul_forward(eng_, logits_local, hr, config_.tie_embeddings ? embed_.value : lm_head_.value, nullptr);
  cache->set_length(pos0 + T);
}

}  // namespace tensorpar

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

std::unique_ptr<KvPool> Transformer::make_kv_pool(int64_t n_blocks, int64_t block_size) const {
  const int64_t kv = layers_.empty() ? 0 : layers_[0].attn->kv_local();
  return std::make_unique<KvPool>(config_.n_layers, n_blocks, block_size, kv, config_.head_dim);
}

int64_t Transformer::kv_bytes_per_token() const {
  const int64_t kv = layers_.empty() ? 0 : layers_[0].attn->kv_local();
  return 2 * config_.n_layers * kv * config_.head_dim * int64_t(sizeof(float));
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

void Transformer::forward_batch(Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool) {
  const int64_t C = config_.hidden, bs = pool.block_size();
  Workspace& ws = *ws_;
  // Rows: every chunk's tokens, in order; logits rows: the last (or every) row of a chunk.
  int64_t N = 0, R = 0;
  for (const SeqChunk& c : seqs) {
    const int64_t T = int64_t(c.tokens.size());
    TP_CHECK(T >= 1, "[Transformer::forward_batch] a chunk without tokens");
    TP_CHECK(c.pos0 >= 0 && int64_t(c.blocks.size()) * bs >= c.pos0 + T, "[Transformer::forward_batch] ", T,
             " tokens at position ", c.pos0, " need ", (c.pos0 + T + bs - 1) / bs, " blocks of ", bs,
             ", the chunk has ", c.blocks.size());
    for (int32_t b : c.blocks)
      TP_CHECK(b >= 0 && b < pool.n_blocks(), "[Transformer::forward_batch] block ", b, " outside the pool of ",
               pool.n_blocks());
    N += T;
    R += c.logits == LogitRows::kAll ? T : c.logits == LogitRows::kLast ? 1 : 0;
  }
  TP_CHECK(N >= 1, "[Transformer::forward_batch] no tokens");
  TP_CHECK(logits_local.shape() == (Shape{R, vocab_range_.size()}) && logits_local.dtype() == DType::kF32,
           "[Transformer::forward_batch] logits_local: got ", logits_local.describe(), ", expected f32",
           shape_str({R, vocab_range_.size()}), " (rank ", tp_.rank(), ")");
  const int64_t NHl = layers_[0].attn->q_local(), NKVl = layers_[0].attn->kv_local();
  ws.reserve(N, C, NHl * config_.head_dim, NKVl * config_.head_dim);
  ws.seqs.clear();
  ws.logit_rows.clear();
  int64_t row = 0;
  for (const SeqChunk& c : seqs) {
    const int64_t T = int64_t(c.tokens.size());
    for (int64_t t = 0; t < T; ++t) {
      ws.ids[size_t(row + t)] = c.tokens[size_t(t)];
      ws.positions[size_t(row + t)] = c.pos0 + t;
    }
    PagedSeq p;
    p.row_begin = row, p.T = T, p.pos0 = c.pos0, p.blocks = c.blocks.data(), p.n_blocks = int64_t(c.blocks.size());
    ws.seqs.push_back(p);
    if (c.logits == LogitRows::kAll)
      for (int64_t t = 0; t < T; ++t) ws.logit_rows.push_back(row + t);
    else if (c.logits == LogitRows::kLast)
      ws.logit_rows.push_back(row + T - 1);
    row += T;
  }
  // Inference multiplies with row-invariant kernels (see MatmulEngine::set_row_invariant).
  eng_.set_row_invariant(true);
  struct Restore {
    MatmulEngine& e;
    ~Restore() { e.set_row_invariant(false); }
  } restore{eng_};
  Tensor x = ws.x.slice(0, 0, N), h = ws.h.slice(0, 0, N), a = ws.a.slice(0, 0, N);
  embed(x, ws.ids.data(), ws.positions.data(), N);
  float* xp = x.data<float>();
  const float* ap = a.data<float>();
  auto residual = [&] {
    for (int64_t i = 0; i < N * C; ++i) xp[i] += ap[i];
  };
  const AttentionScratch scratch{ws.q.data<float>(), ws.k.data<float>(), ws.v.data<float>(), ws.att.data<float>()};
  for (size_t l = 0; l < layers_.size(); ++l) {
    TransformerLayer& L = layers_[l];
    norm_forward(h.data<float>(), nullptr, nullptr, xp, L.norm1_w, L.norm1_b, N);
    L.attn->forward_paged(eng_, a, h, ws.positions.data(), ws.seqs, pool.k(int64_t(l)), pool.v(int64_t(l)), bs,
                          scratch, tp_);
    residual();
    norm_forward(h.data<float>(), nullptr, nullptr, xp, L.norm2_w, L.norm2_b, N);
    L.mlp->forward(eng_, a, h, ws.mlp, tp_);
    residual();
  }
  if (R == 0) return;
  // The final norm and the LM head only for the logits rows (gathered into h's first R rows).
  float* hp = ws.a.data<float>();
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(hp + r * C, xp + ws.logit_rows[size_t(r)] * C, size_t(C) * sizeof(float));
  Tensor hr = ws.h.slice(0, 0, R);
  norm_forward(hr.data<float>(), nullptr, nullptr, hp, norm_w_, norm_b_, R);
  if (logits_local.numel() > 0)
    matmul_forward(eng_, logits_local, hr, config_.tie_embeddings ? embed_.value : lm_head_.value, nullptr);
}

}  // namespace tensorpar

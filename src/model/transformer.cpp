// Transformer construction, KV storage and the inference forward (see transformer.h). Inference
// reuses a per-model workspace that only grows, so decoding allocates nothing per token.
#include "model/transformer.h"

#include <cmath>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/elementwise.h"
#include "core/weight_arena.h"
#include "kernels/cpu/int8_matmul.h"
#include "model/transformer_state.h"

namespace tensorpar {

// ---- construction ----

ExpertSplit expert_split_of(const ModelConfig& c, const ExpertParallel& ep, int tp_size, int tp_rank) {
  ExpertSplit s;
  s.shared_size = tp_size, s.shared_rank = tp_rank;
  const int size = ep.dispatch ? ep.dispatch->size() : ep.size;
  TP_CHECK(size >= 1, "[Transformer] expert-parallel size ", size, ", expected >= 1");
  TP_CHECK(size == 1 || c.moe.n_experts > 0, "[Transformer] --ep ", size, ": ", c.model_type,
           " has no experts (expert parallelism applies to mixture-of-experts models)");
  if (ep.dispatch) {
    s.ep_size = size, s.ep_rank = ep.dispatch->rank();
    s.etp_size = tp_size, s.etp_rank = tp_rank;
  } else {
    TP_CHECK(tp_size % size == 0, "[Transformer] --ep ", size, " does not divide --tp ", tp_size,
             ": at inference the expert-parallel ranks are a part of the tensor-parallel group (each expert's ffn "
             "is split over tp / ep ranks)");
    s.ep_size = size, s.etp_size = tp_size / size;
    s.ep_rank = tp_rank / s.etp_size, s.etp_rank = tp_rank % s.etp_size;
  }
  TP_CHECK(c.moe.n_experts == 0 || s.ep_size <= c.moe.n_experts, "[Transformer] --ep ", s.ep_size, " exceeds the ",
           c.moe.n_experts, " experts of ", c.model_type, " (every expert-parallel rank needs an expert)");
  return s;
}

Transformer::Transformer(const ModelConfig& config, Communicator& tp, int64_t quant_align, LayerSpan span,
                         ExpertParallel experts)
    : config_(config), tp_(tp), span_(span), ep_(experts), ws_(std::make_unique<Workspace>()),
      train_(std::make_unique<TrainState>()), scratch_(std::make_unique<TrainScratch>()),
      stage_spare_(std::make_shared<std::vector<std::unique_ptr<TrainState>>>()) {
  config_.validate(config_.model_type);
  const ModelConfig& c = config_;
  if (span_.last < 0) span_.last = c.n_layers;
  TP_CHECK(span_.first >= 0 && span_.first <= span_.last && span_.last <= c.n_layers, "[Transformer] layers [",
           span_.first, ", ", span_.last, "): expected a range within the model's ", c.n_layers);
  const int size = tp.size(), rank = tp.rank();
  const bool gpt2 = c.family == ArchFamily::kGpt2;
  vocab_range_ = tensorpar::vocab_range(c.vocab_size, size, rank);
  auto rope_table = [&](const RopeConfig& r) {
    RopeScaling sc;
    sc.type = r.scaling;
    sc.factor = r.factor;
    sc.low_freq_factor = r.low_freq_factor;
    sc.high_freq_factor = r.high_freq_factor;
    sc.original_max_position_embeddings = double(r.original_max_position);
    return std::make_unique<RopeTable>(RopeTable::make(c.head_dim, r.theta, r.layout, sc));
  };
  if (!gpt2) rope_ = rope_table(c.rope);
  if (!c.layer_sliding.empty()) rope_local_ = rope_table(c.rope_local);
  const std::vector<Range> ffn_ranges = mlp_ffn_ranges(c.ffn, size, quant_align);
  expert_split_ = expert_split_of(c, ep_, size, rank);
  layers_.reserve(size_t(span_.last - span_.first));
  for (int64_t l = span_.first; l < span_.last; ++l)
    layers_.emplace_back(c, l, c.is_sliding(l) ? rope_local_.get() : rope_.get(), ffn_ranges, size, rank,
                         expert_split_, quant_align);
  // The embedding also lives with the head when tied (its table is the head's weight).
  if (span_.embedding || (span_.head && c.tie_embeddings)) {
    embed_ = std::make_unique<VocabParallelEmbedding>(c.vocab_size, c.hidden, size, rank);
    if (gpt2) pos_embed_.value = Tensor::zeros({c.max_position, c.hidden}, DType::kF32);
  }
  if (span_.head) {
    final_norm_ = std::make_unique<Norm>(c.hidden, gpt2, float(c.norm_eps), c.norm_weight_offset);
    if (!c.tie_embeddings) lm_head_ = std::make_unique<ColumnParallelLinear>(c.hidden, c.vocab_size, false, size, rank);
  }
  // Ranks that share a replicated kv head sum their k/v gradients in this group (collective
  // over tp, so every rank takes part; ranks without heads get a group of their own).
  if (size > c.n_kv_heads) {
    const HeadRange h = partition_heads(c.n_heads, c.n_kv_heads, size, rank);
    kv_group_ = tp.split(h.kv.empty() ? int(c.n_kv_heads) + rank : int(h.kv.begin), rank);
  }
}

Transformer::~Transformer() = default;

void Transformer::check_whole_model(const char* where) const {
  TP_CHECK(span_.first == 0 && span_.last == config_.n_layers && span_.embedding && span_.head, "[", where,
           "] this rank holds layers [", span_.first, ", ", span_.last, ")", span_.embedding ? " with" : " without",
           " the embedding and", span_.head ? " with" : " without",
           " the head: a pipeline stage runs under a pipeline schedule, not alone");
}

std::unique_ptr<KvPool> Transformer::make_kv_pool(int64_t n_blocks, int64_t block_size) const {
  const int64_t kv = layers_.empty() ? 0 : layers_[0].attn().kv_local();
  return std::make_unique<KvPool>(int64_t(layers_.size()), n_blocks, block_size, kv, config_.head_dim, kv_dtype_);
}

int64_t Transformer::kv_bytes_per_token() const {
  const int64_t kv = layers_.empty() ? 0 : layers_[0].attn().kv_local();
  return 2 * int64_t(layers_.size()) * dtype_nbytes(kv_dtype_, kv * config_.head_dim);
}

void Transformer::set_kv_dtype(DType dtype) {
  TP_CHECK(dtype == DType::kF32 || dtype == DType::kF16, "[set_kv_dtype] the KV cache is f32 or f16, not ",
           dtype_name(dtype));
  kv_dtype_ = dtype;
}

int64_t Transformer::weight_bytes() const {
  int64_t n = pos_embed_.value.ndim() > 0 ? pos_embed_.value.nbytes() : 0;
  if (embed_) n += embed_->weight().nbytes();
  if (lm_head_) n += lm_head_->weight_bytes();
  if (final_norm_) n += final_norm_->weight_bytes();
  for (const TransformerLayer& l : layers_) n += l.weight_bytes();
  return n;
}

void Transformer::load_weights(const WeightSource& src) {
  if (src.options().tp_invariant) {
    // Row-parallel layers hold whole rows (RowParallelLinear::hold_whole_rows): every output
    // computed over all of K on one rank, so the logits are bitwise those of tp 1.
    for (int64_t l = span_.first; l < span_.last; ++l) {
      TransformerLayer& L = layer(l);
      L.attn().o().hold_whole_rows(tp_);
      if (!L.is_moe()) {
        L.mlp().down().hold_whole_rows(tp_);
        continue;
      }
      for (int64_t e = L.moe().local_experts().begin; e < L.moe().local_experts().end; ++e) {
        RowParallelLinear& down = L.moe().expert(e).down();
        TP_CHECK(int(down.in_ranges().size()) == tp_.size(), "[load_model] tp_invariant: expert ", e, " of layer ", l,
                 " is split over ", down.in_ranges().size(), " ranks, not the ", tp_.size(),
                 " of its TP group: --tp-invariant does not run with expert parallelism (--ep)");
        down.hold_whole_rows(tp_);
      }
      if (L.moe().has_shared()) L.moe().shared().down().hold_whole_rows(tp_);
    }
  }
  if (config_.family == ArchFamily::kGpt2)
    load_gpt2(*this, src);
  else if (config_.family == ArchFamily::kGemma3)
    load_gemma3(*this, src);
  else
    load_llama(*this, src);
  train_->invalidate();
}

// ---- shared pieces ----

namespace {

// Gemma scales embeddings by sqrt(C), rounded to the activations' dtype (f32) as HF does.
float embedding_scale(const ModelConfig& c) {
  return c.family == ArchFamily::kGemma3 ? float(std::sqrt(double(c.hidden))) : 1.0f;
}

}  // namespace

void Transformer::embed_backward(Tensor& d_x, const int64_t* ids, int64_t N) {
  const float s = embedding_scale(config_);
  if (s != 1.0f) scale_array(d_x.data<float>(), s, N * d_x.dim(1));  // d_x is not needed after this
  embed_->backward(d_x, ids, N);
}

void Transformer::softcap_logits(Tensor& logits) const {
  const float cap = float(config_.final_logit_softcap);
  if (cap == 0.0f) return;
  float* p = logits.data<float>();
  for (int64_t i = 0; i < logits.numel(); ++i) p[i] = cap * std::tanh(p[i] / cap);
}

void Transformer::softcap_logits_backward(Tensor& d_logits, const Tensor& capped_logits) const {
  const float cap = float(config_.final_logit_softcap);
  if (cap == 0.0f) return;
  float* d = d_logits.data<float>();
  const float* l = capped_logits.data<float>();
  for (int64_t i = 0; i < d_logits.numel(); ++i) {
    const float t = l[i] / cap;  // tanh(z / cap); d(cap tanh(z / cap))/dz = 1 - tanh^2
    d[i] *= 1.0f - t * t;
  }
}

void Transformer::embed(Tensor& x, const int64_t* ids, const int64_t* positions, int64_t N) const {
  embed_->forward(x, ids, N, tp_);
  if (const float s = embedding_scale(config_); s != 1.0f) scale_array(x.data<float>(), s, N * x.dim(1));
  if (config_.family != ArchFamily::kGpt2) return;
  const int64_t C = config_.hidden;
  const float* wpe = pos_embed_.value.data<float>();
  float* out = x.data<float>();
  for (int64_t n = 0; n < N; ++n) {
    TP_CHECK(positions[n] >= 0 && positions[n] < config_.max_position, "[Transformer::forward] position ",
             positions[n], " exceeds the model's ", config_.max_position, " learned positions");
    const float* p = wpe + positions[n] * C;
    float* o = out + n * C;
    for (int64_t i = 0; i < C; ++i) o[i] += p[i];
  }
}

void Transformer::set_int8_activations(bool on) {
  eng_.set_int8_activations(on);
  // Each weight is packed where this CPU prefers its type packed (packed_weights.h).
  // MoE experts keep the GGUF layout (their grouped matmul reads it). A tied head is the
  // embedding table, which looks its rows up through the packed layout.
  const bool packed = on;
  const WeightArena arena;  // the packed weights side by side in huge pages, in reading order
  for (TransformerLayer& L : layers_) {
    L.attn().qkv().set_row_packed(packed);
    L.attn().o().set_row_packed(packed);
    if (!L.is_moe()) {
      L.mlp().in().set_row_packed(packed);
      L.mlp().down().set_row_packed(packed);
    }
  }
  if (lm_head_) lm_head_->set_row_packed(packed);
  else if (embed_ && span_.head) embed_->set_row_packed(packed);
}

const Tensor& Transformer::head_weight() const { return lm_head_ ? lm_head_->weight() : embed_->weight(); }

Tensor& Transformer::head_grad() {
  Tensor& g = lm_head_ ? lm_head_->d_weight() : embed_->d_weight();
  ensure_grad(g, head_weight().shape());
  return g;
}

// ---- inference ----

void Transformer::forward_batch(Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool) {
  check_whole_model("Transformer::forward_batch");
  run_batch(nullptr, logits_local, seqs, pool);
}

void Transformer::forward_stage(Tensor& hidden, Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool) {
  run_batch(&hidden, logits_local, seqs, pool);
}

void Transformer::run_batch(Tensor* hidden, Tensor& logits_local, std::span<const SeqChunk> seqs, KvPool& pool) {
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
    R += logit_rows(c);
  }
  TP_CHECK(N >= 1, "[Transformer::forward_batch] no tokens");
  TP_CHECK(span_.embedding || (hidden && hidden->shape() == (Shape{N, C}) && hidden->dtype() == DType::kF32),
           "[Transformer::forward_stage] a stage without the embedding needs the previous stage's f32",
           shape_str({N, C}), ", got ", hidden ? hidden->describe() : std::string("none"), " (layers [", span_.first,
           ", ", span_.last, "), tp rank ", tp_.rank(), ")");
  TP_CHECK(!span_.head || (logits_local.shape() == (Shape{R, vocab_range_.size()}) && logits_local.dtype() == DType::kF32),
           "[Transformer::forward_batch] logits_local: got ", logits_local.describe(), ", expected f32",
           shape_str({R, vocab_range_.size()}), " (rank ", tp_.rank(), ")");
  ws.ids.resize(size_t(N));
  ws.positions.resize(size_t(N));
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
  Tensor x = scratch_rows(ws.x, N, C);
  if (span_.embedding)
    embed(x, ws.ids.data(), ws.positions.data(), N);
  else
    x.copy_from(*hidden);
  AttentionRows rows;
  rows.positions = ws.positions.data();
  rows.seqs = ws.seqs;
  rows.block_size = bs;
  const LayerContext ctx{eng_, tp_, nullptr, ep_.dispatch};
  for (size_t l = 0; l < layers_.size(); ++l) {
    rows.k_pool = pool.k(int64_t(l));
    rows.v_pool = pool.v(int64_t(l));
    rows.kv_dtype = pool.dtype();
    layers_[l].forward(ctx, x, x, rows, ws.acts);
  }
  if (!span_.head) {
    ensure_f32(*hidden, {N, C});
    hidden->copy_from(x);
    return;
  }
  if (R == 0) return;
  // The final norm and the LM head only for the logits rows (gathered first).
  Tensor xr = scratch_rows(ws.acts.h1, R, C), hr = scratch_rows(ws.hf, R, C);
  for (int64_t r = 0; r < R; ++r)
    std::memcpy(xr.data<float>() + r * C, x.data<float>() + ws.logit_rows[size_t(r)] * C, size_t(C) * sizeof(float));
  final_norm_->forward(hr.data<float>(), scratch_rows(ws.mean, R, 1).data<float>(), scratch_rows(ws.rstd, R, 1).data<float>(),
                       xr.data<float>(), R);
  if (logits_local.numel() > 0) matmul_forward(eng_, logits_local, hr, head_weight(), nullptr);
  softcap_logits(logits_local);
}

std::vector<LayerSpan> split_layers(int64_t n_layers, int n_stages, std::span<const int64_t> counts) {
  TP_CHECK(n_stages >= 1, "[split_layers] stages: got ", n_stages, ", expected >= 1");
  std::vector<int64_t> n(static_cast<size_t>(n_stages));
  if (counts.empty()) {
    TP_CHECK(n_layers >= n_stages, "[split_layers] ", n_layers, " layers over ", n_stages,
             " pipeline stages: every stage needs at least one layer (lower --pp)");
    for (int s = 0; s < n_stages; ++s) n[size_t(s)] = n_layers / n_stages + (s < n_layers % n_stages ? 1 : 0);
  } else {
    std::string given;
    int64_t sum = 0;
    for (int64_t c : counts) {
      if (!given.empty()) given += ',';
      given += std::to_string(c);
      sum += c;
    }
    TP_CHECK(int64_t(counts.size()) == n_stages, "[split_layers] --pp-layers ", given, " names ", counts.size(),
             " stages, expected ", n_stages, " (--pp)");
    TP_CHECK(sum == n_layers, "[split_layers] --pp-layers ", given, " sums to ", sum, ", expected the model's ",
             n_layers, " layers");
    for (int s = 0; s < n_stages; ++s) {
      TP_CHECK(counts[size_t(s)] >= 1, "[split_layers] --pp-layers ", given, ": stage ", s, " gets ",
               counts[size_t(s)], " layers, expected >= 1");
      n[size_t(s)] = counts[size_t(s)];
    }
  }
  std::vector<LayerSpan> spans(static_cast<size_t>(n_stages));
  int64_t first = 0;
  for (int s = 0; s < n_stages; ++s) {
    LayerSpan& sp = spans[size_t(s)];
    sp.first = first, sp.last = first + n[size_t(s)];
    sp.embedding = s == 0, sp.head = s == n_stages - 1;
    first = sp.last;
  }
  return spans;
}

}  // namespace tensorpar

// shard_plan (see shard_plan.h): tensor names of the llama family (HF and GGUF) and GPT-2.
#include "model/shard_plan.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "parallel/parallel_attention.h"
#include "model/transformer.h"
#include "parallel/parallel_mlp.h"

namespace tensorpar {

namespace {

bool has(const std::string& s, const char* x) { return s.find(x) != std::string::npos; }

Range scaled(Range r, int64_t f) { return {r.begin * f, r.end * f}; }

// bytes * num / den (0 when den is 0) in 128-bit arithmetic: a large tensor's bytes times its
// element count overflows int64 (an f32 embedding of 128256 x 16384 has 8.4e9 bytes and 2.1e9
// elements). Saturates at INT64_MAX, which only shapes that disagree with the config reach.
int64_t scale_bytes(int64_t bytes, int64_t num, int64_t den) {
  if (den <= 0) return 0;
  const __int128 r = static_cast<__int128>(bytes) * num / den;
  return r > std::numeric_limits<int64_t>::max() ? std::numeric_limits<int64_t>::max() : int64_t(r);
}

// The expert index of an MoE expert tensor ("...experts.<e>...."), -1 for any other tensor.
int64_t expert_of(const std::string& n) {
  const size_t at = n.find(".experts.");
  if (at == std::string::npos) return -1;
  return std::stoll(n.substr(at + 9));
}

}  // namespace

int64_t ffn_alignment(const ModelConfig& c, const std::vector<TensorInfo>& tensors) {
  int64_t align = 32;
  for (const TensorInfo& t : tensors)
    if (t.dtype && dtype_is_quantized(*t.dtype) && t.shape.size() >= 2 &&
        (t.shape.back() == c.ffn || (c.moe.n_experts > 0 && t.shape.back() == c.moe.expert_ffn)))
      align = std::max(align, dtype_block_elems(*t.dtype));
  return align;
}

std::vector<TensorShardPlan> shard_plan(const ModelConfig& c, const std::vector<TensorInfo>& tensors, int tp,
                                        int ep) {
  TP_CHECK(tp >= 1, "[shard_plan] tp: got ", tp, ", expected >= 1");
  const int64_t HS = c.head_dim;
  std::vector<Range> q, kv, vocab;
  for (int r = 0; r < tp; ++r) {
    const HeadRange h = partition_heads(c.n_heads, c.n_kv_heads, tp, r);
    q.push_back(scaled(h.q, HS));
    kv.push_back(scaled(h.kv, HS));
    vocab.push_back(vocab_range(c.vocab_size, tp, r));
  }
  const int64_t align = ffn_alignment(c, tensors);
  const std::vector<Range> ffn = mlp_ffn_ranges(c.ffn, tp, align);
  const bool gpt2 = c.family == ArchFamily::kGpt2;
  // MoE: per rank, the experts it holds and its slice of each one's ffn, and the shared expert's
  // split over the whole group.
  std::vector<Range> owned, slice, shared;
  if (c.moe.n_experts > 0) {
    for (int r = 0; r < tp; ++r) {
      const ExpertSplit s = expert_split_of(c, {ep, nullptr}, tp, r);
      owned.push_back(expert_ranges(c.moe.n_experts, s.ep_size)[size_t(s.ep_rank)]);
      slice.push_back(mlp_ffn_ranges(c.moe.expert_ffn, s.etp_size, align)[size_t(s.etp_rank)]);
    }
    if (c.moe.shared_ffn > 0) shared = mlp_ffn_ranges(c.moe.shared_ffn, tp, align);
  }
  std::vector<Range> expert_ffn;
  std::vector<TensorShardPlan> out;
  for (const TensorInfo& t : tensors) {
    TensorShardPlan p;
    p.info = t;
    const std::string& n = t.name;
    const std::vector<Range>* ranges = nullptr;
    int dim = 0;        // split dim of the stored tensor
    int64_t parts = 1;  // GPT-2's fused c_attn holds 3 parts (q, k, v) per rank range
    if (gpt2) {
      if (has(n, "wte")) ranges = &vocab;
      else if (has(n, "c_attn")) ranges = &q, dim = int(t.shape.size()) - 1, parts = 3;
      else if (has(n, "attn.c_proj.weight")) ranges = &q, dim = 0;
      else if (has(n, "mlp.c_fc")) ranges = &ffn, dim = int(t.shape.size()) - 1;
      else if (has(n, "mlp.c_proj.weight")) ranges = &ffn, dim = 0;
    } else if (const int64_t e = expert_of(n); e >= 0 && !owned.empty()) {
      expert_ffn.clear();
      for (int r = 0; r < tp; ++r) expert_ffn.push_back(owned[size_t(r)].contains(e) ? slice[size_t(r)] : Range{});
      ranges = &expert_ffn;
      dim = has(n, "down_proj") || has(n, ".w2.") ? 1 : 0;
    } else if (has(n, "_exps.") && !owned.empty() && t.shape.size() == 3) {
      // GGUF's stacked experts (E, rows, cols): each rank reads its experts' slices.
      p.split = "experts";
      const int64_t per_expert = t.nbytes / std::max<int64_t>(1, t.shape[0]);
      for (int r = 0; r < tp; ++r) {
        p.ranges.push_back(owned[size_t(r)]);
        p.bytes.push_back(scale_bytes(per_expert, owned[size_t(r)].size() * slice[size_t(r)].size(), c.moe.expert_ffn));
      }
      out.push_back(std::move(p));
      continue;
    } else if ((has(n, "shared_expert.") || (has(n, "_shexp.") && !has(n, "gate_inp"))) && !shared.empty()) {
      ranges = &shared;
      dim = has(n, "down_proj") || has(n, "ffn_down") ? 1 : 0;
    } else if (has(n, "ffn_gate_inp")) {  // GGUF routers: replicated
    } else {
      if (has(n, "embed_tokens") || has(n, "token_embd") || has(n, "lm_head") || n == "output.weight") ranges = &vocab;
      else if (has(n, "q_proj") || has(n, "attn_q.")) ranges = &q;
      else if (has(n, "k_proj") || has(n, "v_proj") || has(n, "attn_k.") || has(n, "attn_v.")) ranges = &kv;
      else if (has(n, "o_proj") || has(n, "attn_output")) ranges = &q, dim = 1;
      else if (has(n, "gate_proj") || has(n, "up_proj") || has(n, "ffn_gate") || has(n, "ffn_up")) ranges = &ffn;
      else if (has(n, "down_proj") || has(n, "ffn_down")) ranges = &ffn, dim = 1;
    }
    if (!ranges || dim >= int(t.shape.size())) {
      p.split = "replicated";
      for (int r = 0; r < tp; ++r) {
        p.ranges.push_back({0, t.shape.empty() ? 1 : t.shape[0]});
        p.bytes.push_back(t.nbytes);
      }
    } else {
      p.split = dim == int(t.shape.size()) - 1 && t.shape.size() == 2 ? "cols" : "rows";
      for (int r = 0; r < tp; ++r) {
        const Range rr = (*ranges)[size_t(r)];
        p.ranges.push_back(rr);
        // The rank reads rr.size() * parts of the tensor's t.shape[dim] rows along dim.
        p.bytes.push_back(scale_bytes(t.nbytes, rr.size() * parts, t.shape[size_t(dim)]));
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

}  // namespace tensorpar

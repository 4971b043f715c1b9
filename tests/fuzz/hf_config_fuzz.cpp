// libFuzzer target: an HF config.json from arbitrary bytes through ModelConfig::from_hf_text
// (parse + validate); a config that passes then has derived from it what loading and
// checkpointing derive: the RoPE tables, at TP sizes 1..4 (and each EP size dividing them, for
// MoE models) every rank's heads, vocab rows, ffn columns and experts, the shard plan of the
// tensors such a checkpoint holds, and its config.json as a checkpoint stores it
// (hf_config_json), which must read back to the same model.
// Any crash, sanitizer report or exception other than tensorpar::Error is a bug; so are ranges
// that do not tile their dim, and a stored config that reads back differently or not at all.
#include <cmath>
#include <string>
#include <vector>

#include "core/checked_math.h"
#include "core/error.h"
#include "fuzz_input.h"
#include "kernels/cpu/rope.h"
#include "model/model_config.h"
#include "model/shard_plan.h"
#include "model/transformer.h"
#include "parallel/parallel_mlp.h"
#include "parallel/parallel_moe.h"
#include "parallel/partition.h"
#include "train/hf_export.h"

namespace {

using namespace tensorpar;

void rope_tables(const ModelConfig& c) {
  for (const RopeConfig* r : {&c.rope, &c.rope_local}) {
    if (c.family == ArchFamily::kGpt2 || (r == &c.rope_local && c.layer_sliding.empty())) continue;
    RopeScaling sc;
    sc.type = r->scaling;
    sc.factor = r->factor;
    sc.low_freq_factor = r->low_freq_factor;
    sc.high_freq_factor = r->high_freq_factor;
    sc.original_max_position_embeddings = double(r->original_max_position);
    try {
      (void)RopeTable::make(c.head_dim, r->theta, r->layout, sc);
    } catch (const Error& e) {
      fuzz::refused(e);
    }
  }
}

void check_tiles(const std::vector<Range>& ranges, int64_t n, const char* what) {
  if (!ranges_tile(ranges, n)) fuzz::fail(what);
}

// The tensors of layer 0 and the last layer of an HF checkpoint of `c` (f32), and the model-level
// ones; the layers between add nothing new to a shard plan.
std::vector<TensorInfo> hf_tensors(const ModelConfig& c) {
  const char* w = "tensors of the config";
  std::vector<TensorInfo> out;
  auto add = [&](const std::string& name, Shape shape) {
    int64_t n = 4;
    for (int64_t d : shape) n = checked_mul(n, d, w);
    out.push_back({name, std::move(shape), "F32", DType::kF32, 0, n, "model.safetensors"});
  };
  const int64_t C = c.hidden, q = checked_mul(c.n_heads, c.head_dim, w),
                kv = checked_mul(c.n_kv_heads, c.head_dim, w);
  if (c.family == ArchFamily::kGpt2) {
    add("wte.weight", {c.vocab_size, C});
    add("wpe.weight", {c.max_position, C});
    for (int64_t l : {int64_t(0), c.n_layers - 1}) {
      const std::string p = "h." + std::to_string(l) + ".";
      add(p + "attn.c_attn.weight", {C, checked_mul(3, q, w)});
      add(p + "attn.c_attn.bias", {checked_mul(3, q, w)});
      add(p + "attn.c_proj.weight", {q, C});
      add(p + "mlp.c_fc.weight", {C, c.ffn});
      add(p + "mlp.c_proj.weight", {c.ffn, C});
      add(p + "ln_1.weight", {C});
    }
    return out;
  }
  add("model.embed_tokens.weight", {c.vocab_size, C});
  if (!c.tie_embeddings) add("lm_head.weight", {c.vocab_size, C});
  add("model.norm.weight", {C});
  for (int64_t l : {int64_t(0), c.n_layers - 1}) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    add(p + "self_attn.q_proj.weight", {q, C});
    add(p + "self_attn.k_proj.weight", {kv, C});
    add(p + "self_attn.v_proj.weight", {kv, C});
    add(p + "self_attn.o_proj.weight", {C, q});
    if (c.qk_norm) add(p + "self_attn.q_norm.weight", {c.head_dim});
    if (c.is_moe(l)) {
      const int64_t E = c.moe.n_experts, F = c.moe.expert_ffn;
      add(p + "mlp.gate.weight", {E, C});
      for (int64_t e : {int64_t(0), E - 1}) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {F, C});
        add(x + "down_proj.weight", {C, F});
      }
      if (c.moe.shared_ffn > 0) {
        add(p + "mlp.shared_expert.up_proj.weight", {c.moe.shared_ffn, C});
        add(p + "mlp.shared_expert.down_proj.weight", {C, c.moe.shared_ffn});
      }
    } else {
      add(p + "mlp.gate_proj.weight", {c.ffn, C});
      add(p + "mlp.down_proj.weight", {C, c.ffn});
    }
  }
  return out;
}

void shard(const ModelConfig& c) {
  std::vector<TensorInfo> tensors;
  try {
    tensors = hf_tensors(c);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  for (int tp = 1; tp <= 4; ++tp) {
    std::vector<Range> q, kv, vocab;
    for (int r = 0; r < tp; ++r) {
      const HeadRange h = partition_heads(c.n_heads, c.n_kv_heads, tp, r);
      q.push_back(h.q);
      if (h.kv.size() > 0 && tp <= c.n_kv_heads) kv.push_back(h.kv);
      vocab.push_back(vocab_range(c.vocab_size, tp, r));
    }
    check_tiles(q, c.n_heads, "query heads do not tile");
    if (tp <= c.n_kv_heads) check_tiles(kv, c.n_kv_heads, "kv heads do not tile");
    check_tiles(vocab, c.vocab_size, "vocab rows do not tile");
    try {
      check_tiles(mlp_ffn_ranges(c.ffn, tp, 32), c.ffn, "ffn columns do not tile");
    } catch (const Error& e) {
      fuzz::refused(e);
    }
    for (int ep = 1; ep <= tp; ++ep) {
      if (tp % ep != 0 || (ep > 1 && c.moe.n_experts == 0)) continue;
      try {
        for (int r = 0; r < tp; ++r) {
          const ExpertSplit s = expert_split_of(c, {ep, nullptr}, tp, r);
          if (c.moe.n_experts > 0)
            check_tiles(expert_ranges(c.moe.n_experts, s.ep_size), c.moe.n_experts,
                        "experts do not tile");
        }
        if (!tensors.empty()) (void)shard_plan(c, tensors, tp, ep);
      } catch (const Error& e) {
        fuzz::refused(e);
      }
    }
  }
}

bool close(double a, double b) { return a == b || std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b)); }

// A checkpoint stores hf_config_json(c); resuming or exporting reads it back with from_hf_json.
void stored_round_trip(const ModelConfig& c) {
  nlohmann::json j;
  try {
    j = hf_config_json(c);
  } catch (const Error& e) {  // a config with no HF form
    fuzz::refused(e);
    return;
  }
  ModelConfig b;
  try {
    b = ModelConfig::from_hf_json(j, "stored config");
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    fuzz::fail("hf_config_json wrote a config that from_hf_json refuses");
  }
  const bool same =
      b.family == c.family && b.vocab_size == c.vocab_size && b.hidden == c.hidden &&
      b.n_layers == c.n_layers && b.n_heads == c.n_heads && b.n_kv_heads == c.n_kv_heads &&
      b.head_dim == c.head_dim && b.ffn == c.ffn && b.max_position == c.max_position &&
      b.tie_embeddings == c.tie_embeddings && b.qkv_bias == c.qkv_bias && b.qk_norm == c.qk_norm &&
      close(b.norm_eps, c.norm_eps) && b.moe.n_experts == c.moe.n_experts &&
      b.moe.top_k == c.moe.top_k && b.moe.expert_ffn == c.moe.expert_ffn &&
      b.moe.shared_ffn == c.moe.shared_ffn && b.moe.layer_moe == c.moe.layer_moe &&
      b.moe.norm_topk == c.moe.norm_topk && b.sliding_window == c.sliding_window &&
      b.layer_sliding == c.layer_sliding && close(b.final_logit_softcap, c.final_logit_softcap) &&
      (c.family == ArchFamily::kGpt2 ||
       (close(b.rope.theta, c.rope.theta) && b.rope.scaling == c.rope.scaling));
  if (!same) {
    std::fprintf(stderr, "read:   %s\nstored: %s\n", c.summary().c_str(), b.summary().c_str());
    fuzz::fail("the stored config reads back to another model");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ModelConfig c = ModelConfig::from_hf_text(fuzz::as_text(data, size), "fuzz/config.json");
    (void)c.summary();
    rope_tables(c);
    shard(c);
    stored_round_trip(c);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}

// libFuzzer target: a sharded training checkpoint's index.json from arbitrary bytes through
// parse_checkpoint_index (what ShardedCheckpointReader checks when it opens a checkpoint); an
// index that passes then has planned, for every tensor, the reads that read_full and read_slice
// would make (whole, halves along dim 0, a middle slice of the last dim), and its trainer state
// goes through what resume and export read: check_checkpoint_state and the keys read after it,
// stored_model_config and apply_saved_settings.
// Any crash, sanitizer report or exception other than tensorpar::Error is a bug; so is a planned
// read outside its piece or its result.
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_input.h"
#include "io/sharded_checkpoint.h"
#include "train/checkpoint.h"
#include "train/hf_export.h"
#include "train/run_settings.h"

namespace {

using namespace tensorpar;
using nlohmann::json;

constexpr const char* kWhere = "fuzz/index.json";

void plan(const json& index, const std::string& name, const Shape& g, int dim, int64_t begin,
          int64_t end) {
  std::vector<SlicePart> parts;
  try {
    parts = plan_checkpoint_slice(index, name, dim, begin, end, kWhere);
  } catch (const Error& e) {
    fuzz::refused(e);
    return;
  }
  const json& pieces = index["tensors"][name]["pieces"];
  const int64_t n_files = int64_t(index["files"].size());
  for (const SlicePart& p : parts) {
    bool ok = p.file >= 0 && p.file < n_files && p.src_begin >= 0 && p.src_begin <= p.src_end &&
              p.dst_begin >= 0 && p.dst_begin <= p.dst_end && p.dst_end <= end - begin &&
              p.src_end - p.src_begin == p.dst_end - p.dst_begin;
    if (p.shard_dim >= 0)
      ok = ok && p.shard_dim != dim && p.shard_dim < int(g.size()) && p.shard_begin >= 0 &&
           p.shard_begin <= p.shard_end && p.shard_end <= g[size_t(p.shard_dim)];
    // The piece the part reads from holds src along dim: its own extent when split along dim.
    bool in_some_piece = false;
    for (const json& pc : pieces) {
      if (pc["file"].get<int64_t>() != p.file) continue;
      const int sd = pc["shard_dim"].get<int>();
      const int64_t extent = sd == dim ? pc["end"].get<int64_t>() - pc["begin"].get<int64_t>()
                                       : g[size_t(dim)];
      in_some_piece = in_some_piece || p.src_end <= extent;
    }
    if (!ok || !in_some_piece) fuzz::fail("a planned read lies outside its piece or the result");
  }
}

void state(const json& s) {
  try {
    check_checkpoint_state(s, kWhere);
    // What resume, export and latest_checkpoint_step read once the state is checked.
    (void)s.value("step", int64_t(0));
    (void)s.value("optimizer_steps", int64_t(0));
    (void)s.value("tokenizer", std::string());
    (void)s.value("data", std::string());
    if (s.contains("schedule"))
      for (const char* key : {"lr", "min_lr", "warmup", "steps"}) (void)s["schedule"].value(key, 0.0);
    if (s.contains("run")) {
      RunSettings mine;
      (void)apply_saved_settings(s["run"], {}, mine);
      RunSettings given;
      (void)apply_saved_settings(s["run"], {"batch", "lr", "bf16", "data"}, given);
    }
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  if (s.contains("config") || s.contains("config_interleaved_rope")) {
    try {
      (void)stored_model_config(s, kWhere);
    } catch (const Error& e) {
      fuzz::refused(e);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  json index;
  try {
    index = parse_checkpoint_index(fuzz::as_text(data, size), kWhere);
  } catch (const Error& e) {
    fuzz::refused(e);
    return 0;
  }
  for (const auto& [name, t] : index["tensors"].items()) {
    const Shape g = t["global_shape"].get<Shape>();
    if (g.empty()) {
      plan(index, name, g, 0, 0, 1);  // read_full of a scalar: refused
      continue;
    }
    plan(index, name, g, 0, 0, g[0]);
    plan(index, name, g, 0, 0, g[0] / 2);
    plan(index, name, g, 0, g[0] / 2, g[0]);
    const int last = int(g.size()) - 1;
    const int64_t n = g[size_t(last)];
    plan(index, name, g, last, n / 3, n - n / 4);
  }
  state(index["state"]);
  return 0;
}

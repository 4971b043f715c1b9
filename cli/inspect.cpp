// `tensorpar inspect --model M --tp N`: the model's config, every tensor (name, stored type,
// shape) and the shard plan at TP size N with the bytes each rank reads. Reads headers only.
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/auto_plan.h"
#include "cli/commands.h"
#include "cli/run_model.h"
#include "io/gguf.h"
#include "model/load_model.h"
#include "model/shard_plan.h"
#include "model/transformer.h"

namespace tensorpar::cli {

namespace {

struct InspectOptions {
  CommonOptions common;
  std::string model;
};

void run_inspect(const InspectOptions& o) {
  ModelOptions paths;
  paths.model = o.model;
  check_model_paths(paths, "inspect", /*needs_tokenizer=*/false);
  const ModelConfig config = read_model_config(o.model);
  const int tp = resolve_inference_tp(o.common, config, o.model, "auto", "inspect");
  check_tp_size(tp, config, "inspect");
  const auto store = open_tensor_store(o.model);
  expert_split_of(config, {o.common.ep, nullptr}, tp, 0);  // an EP size the model and tp take
  const auto plan = shard_plan(config, store->tensors(), tp, o.common.ep);
  std::vector<int64_t> total(size_t(tp), 0);
  int64_t file_bytes = 0;
  for (const auto& p : plan) {
    file_bytes += p.info.nbytes;
    for (int r = 0; r < tp; ++r) total[size_t(r)] += p.bytes[size_t(r)];
  }
  if (o.common.json) {
    nlohmann::json cfg = {{"model_type", config.model_type}, {"layers", config.n_layers}, {"hidden", config.hidden},
                          {"heads", config.n_heads}, {"kv_heads", config.n_kv_heads}, {"head_dim", config.head_dim},
                          {"ffn", config.ffn}, {"vocab", config.vocab_size}, {"tied", config.tie_embeddings},
                          {"rope_theta", config.rope.theta}, {"tp", tp}};
    if (config.moe.n_experts > 0) {
      cfg["experts"] = config.moe.n_experts, cfg["experts_per_token"] = config.moe.top_k, cfg["ep"] = o.common.ep;
      nlohmann::json per = nlohmann::json::array();
      for (int r = 0; r < tp; ++r) {
        const Range e = expert_ranges(config.moe.n_experts, o.common.ep)[size_t(r / (tp / o.common.ep))];
        per.push_back({e.begin, e.end});
      }
      cfg["experts_per_rank"] = per;
    }
    std::cout << nlohmann::json{{"config", cfg}}.dump() << "\n";
    for (const auto& p : plan) {
      nlohmann::json ranges = nlohmann::json::array();
      for (const Range& r : p.ranges) ranges.push_back({r.begin, r.end});
      std::cout << nlohmann::json{{"tensor", p.info.name}, {"dtype", p.info.format}, {"shape", p.info.shape},
                                  {"bytes", p.info.nbytes}, {"split", p.split}, {"ranges", ranges},
                                  {"bytes_per_rank", p.bytes}}
                       .dump()
                << "\n";
    }
    std::cout << nlohmann::json{{"file_bytes", file_bytes}, {"bytes_per_rank", total}}.dump() << "\n";
    return;
  }
  std::printf("model: %s\nconfig: %s\n", o.model.c_str(), config.summary().c_str());
  std::printf("tp %d: heads per rank (q / kv):", tp);
  for (int r = 0; r < tp; ++r) {
    const HeadRange h = partition_heads(config.n_heads, config.n_kv_heads, tp, r);
    std::printf(" r%d %s/%s", r, range_str(h.q).c_str(), range_str(h.kv).c_str());
  }
  if (config.moe.n_experts > 0) {
    std::printf("\nep %d: experts per rank (each expert's ffn over %d ranks):", o.common.ep, tp / o.common.ep);
    for (int r = 0; r < tp; ++r)
      std::printf(" r%d %s", r, range_str(expert_ranges(config.moe.n_experts, o.common.ep)[size_t(r / (tp / o.common.ep))]).c_str());
  }
  std::printf("\n\n%-48s %-6s %-16s %10s  %-10s %s\n", "tensor", "type", "shape", "bytes", "split", "ranges / bytes per rank");
  for (const auto& p : plan) {
    std::string per;
    for (int r = 0; r < tp; ++r)
      per += " " + range_str(p.ranges[size_t(r)]) + ":" + std::to_string(p.bytes[size_t(r)]);
    std::printf("%-48s %-6s %-16s %10lld  %-10s%s\n", p.info.name.c_str(), p.info.format.c_str(),
                shape_str(p.info.shape).c_str(), static_cast<long long>(p.info.nbytes), p.split.c_str(),
                p.split == "replicated" ? "" : per.c_str());
  }
  std::printf("\n%zu tensors, %.2f MiB in the file; weight bytes per rank:", plan.size(), double(file_bytes) / (1 << 20));
  for (int r = 0; r < tp; ++r) std::printf(" r%d %.2f MiB", r, double(total[size_t(r)]) / (1 << 20));
  std::printf("\n");
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto opts = std::make_shared<InspectOptions>();
  CLI::App* cmd = app.add_subcommand("inspect", "Print a model's config, tensors and TP shard plan");
  cmd->add_option("-m,--model", opts->model, "GGUF file or Hugging Face directory")->required();
  add_common_options(*cmd, opts->common);
  cmd->callback([opts] { run_inspect(*opts); });
}

}  // namespace tensorpar::cli

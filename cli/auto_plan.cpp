#include "cli/auto_plan.h"

#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "cli/launch_checks.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "io/tensor_store.h"
#include "plan/search.h"

namespace tensorpar::cli {

namespace {

namespace fs = std::filesystem;
using namespace tensorpar::plan;

int cores_of_this_process() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

// The cluster the plan is made for: --cluster (a preset or a file, e.g. from `plan --calibrate`)
// holding exactly the `world` ranks this command runs (one node of them unless the file's own
// node count divides the world).
ClusterSpec cluster_for_world(const CommonOptions& common, int world) {
  ClusterSpec c = resolve_cluster(common.cluster);
  if (c.world() != world) {
    if (c.nodes < 1 || world % c.nodes != 0) c.nodes = 1;
    c.devices_per_node = world / c.nodes;
  }
  return c;
}

std::string size_text(double bytes) {
  char buf[32];
  if (bytes >= double(1 << 30))
    std::snprintf(buf, sizeof(buf), "%.2f GiB", bytes / (1 << 30));
  else
    std::snprintf(buf, sizeof(buf), "%.1f MiB", bytes / (1 << 20));
  return buf;
}

std::string size_or_auto(int size) {
  return size == kAutoSize ? "auto" : std::to_string(size);
}

std::string world_note(int world, const std::string& source) {
  return detail::concat(world, " ranks (", source, ")");
}

}  // namespace

WeightFormat weight_format_of(const std::string& model_path, const std::string& dtype,
                              const ModelSpec& m) {
  // Bytes per format over the stored tensors; 16-bit ones widened to f32 under --dtype f32.
  std::map<std::string, double> bytes;
  double total = 0;
  for (const TensorInfo& t : open_tensor_store(model_path)->tensors()) {
    std::string format = t.dtype ? std::string(dtype_name(*t.dtype)) : t.format;
    double n = double(t.nbytes);
    if (dtype == "f32" && (format == "bf16" || format == "f16")) format = "f32", n *= 2;
    if (dtype == "bf16" && format == "f32") format = "bf16", n /= 2;
    bytes[format] += n;
    total += n;
  }
  WeightFormat w;
  const double params = double(total_parameters(m));
  if (total > 0 && params > 0) w.bytes_per_parameter = total / params;
  if (total > 0) {
    w.shares.clear();
    for (const auto& [format, n] : bytes) w.shares[format] = n / total;
  }
  return w;
}

CLI::Option* accept_auto(CLI::Option* opt, int max) {
  const std::string what = detail::concat("an integer in [1, ", max, "] or auto");
  return opt->transform(CLI::Validator(
      [max, what](std::string& s) -> std::string {
        if (s == "auto") {
          s = std::to_string(kAutoSize);
          return "";
        }
        int v = 0;
        if (!CLI::detail::lexical_cast(s, v) || v < 1 || v > max)
          return "value " + s + " is not " + what;
        return "";
      },
      "INT|auto"));
}

int auto_world_size(const CommonOptions& common, std::string* source) {
  std::string launcher;
  const int mpi = mpi_launcher_world_size(&launcher);
  if (mpi > 0) {
    if (source) *source = "the MPI world, " + launcher;
    return mpi;
  }
  const int cores = cores_of_this_process();
  const int per_rank = std::max(common.threads_per_rank, 1);
  if (source)
    *source = detail::concat(cores, " cores of this process",
                             per_rank > 1 ? detail::concat(" / ", per_rank, " threads per rank") : "");
  return std::max(1, cores / per_rank);
}

ModelSpec model_spec_from_config(const ModelConfig& c, const std::string& name) {
  ModelSpec m;
  m.name = name;
  m.layers = c.n_layers;
  m.hidden = c.hidden;
  m.heads = c.n_heads;
  m.kv_heads = c.n_kv_heads;
  m.head_dim = c.head_dim;
  m.ffn = c.ffn;
  m.vocab = c.vocab_size;
  m.tied_embeddings = c.tie_embeddings;
  m.qkv_bias = c.qkv_bias;
  if (c.family == ArchFamily::kGpt2) {
    m.mlp = MlpMatrices::kPlain;
    m.linear_biases = true;
    m.norm_vectors = 2;
    m.positions = c.max_position;
  }
  if (c.moe.n_experts > 0) {
    m.experts = c.moe.n_experts;
    m.experts_per_token = c.moe.top_k;
    m.ffn = c.moe.expert_ffn;
  }
  return m;
}

int resolve_inference_tp(const CommonOptions& common, const ModelConfig& config,
                         const std::string& model_path, const std::string& dtype,
                         const char* command) {
  if (common.tp != kAutoSize) return common.tp;
  std::string source;
  const int world = auto_world_size(common, &source);
  if (mpi_launcher_world_size() > 0) {  // one TP group: the whole world is the only choice
    std::fprintf(stderr, "[%s] --tp auto: tp %d, the MPI world\n", command, world);
    return world;
  }
  const ModelSpec m = model_spec_from_config(config, model_path);
  const ClusterSpec c = cluster_for_world(common, world);
  ServeWorkload w;
  const WeightFormat wf = weight_format_of(model_path, dtype, m);
  w.weight_bytes = wf.bytes_per_parameter, w.weight_format_shares = wf.shares;
  w.kv_bytes = 4;     // the KV cache is f32
  w.concurrency = 1;  // ranked by one sequence's time per token
  // One engine serves (no replicas): every TP size up to the world and the heads, one replica.
  std::vector<ServeEstimate> plans;
  for (int tp = 1; tp <= world && tp <= config.n_heads; ++tp)
    plans.push_back(estimate_serve(m, c, w, {tp, 1, 1}));
  TP_CHECK(!plans.empty(), "[", command, "] --tp auto: no TP size fits ", world_note(world, source));
  std::stable_sort(plans.begin(), plans.end(), [](const ServeEstimate& a, const ServeEstimate& b) {
    if (a.fits != b.fits) return a.fits;
    return a.itl_s < b.itl_s;
  });
  const ServeEstimate& best = plans[0];
  std::fprintf(stderr,
               "[%s] --tp auto: the planner chose tp %d of %s on cluster %s: predicted decode "
               "%.3g ms/token for one sequence, %s per rank",
               command, best.plan.tp, world_note(world, source).c_str(), c.name.c_str(),
               best.itl_s * 1e3, size_text(best.weight_bytes + best.kv_bytes_per_seq).c_str());
  if (plans.size() > 1) {
    const ServeEstimate& next = plans[1];
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%.3g ms/token", next.itl_s * 1e3);
    std::fprintf(stderr, "; tp %d next: %s", next.plan.tp, next.fits ? buf : "does not fit in memory");
  }
  std::fprintf(stderr, "\n");
  return best.plan.tp;
}

TrainSizes resolve_train_sizes(const CommonOptions& common, const ModelConfig& config,
                               const TrainSizeRequest& req) {
  TrainSizes out{req.tp, req.pp, req.dp, req.micro_batch};
  if (req.tp != kAutoSize && req.pp != kAutoSize && req.dp != kAutoSize) return out;
  std::string source;
  const int world = auto_world_size(common, &source);
  const ModelSpec m = model_spec_from_config(config, "train");
  ClusterSpec c = cluster_for_world(common, world);
  // How tensorpar reduces dp gradients: overlapped with the last backward in buckets.
  c.eff.dp_overlap = req.dp_buckets;
  TrainWorkload w;  // tensorpar trains with f32 weights, gradients and activations
  w.global_batch = req.batch;
  w.seq = req.seq;
  w.weight_bytes = 4, w.grad_bytes = 4, w.optimizer_bytes = 8, w.activation_bytes = 4;
  TrainConstraints pin;
  pin.tp = req.tp, pin.pp = req.pipeline_allowed ? req.pp : 1, pin.dp = req.dp;
  pin.ep = req.ep;
  pin.micro_batch = int(req.micro_batch);
  pin.interleave = req.interleave;  // what tensorpar train runs: --pp-virtual
  pin.sp = -1;         // priced at tp > 1 only: filtered below
  pin.zero = -1;                   // priced at dp > 1 only: filtered below
  pin.recompute = req.recompute_layers == 0 ? "none" : "full";
  long considered = 0;
  std::vector<TrainEstimate> plans = search_train(m, c, w, pin, &considered);
  // Plans tensorpar can run: every rank needs an attention head.
  std::erase_if(plans, [&](const TrainEstimate& e) {
    return e.plan.tp > config.n_heads || e.plan.zero != (e.plan.dp > 1 ? req.zero : 0) ||
           e.plan.sp != (e.plan.tp > 1 && req.sequence_parallel);
  });
  TP_CHECK(!plans.empty(), "[train] --tp/--pp/--dp auto: no plan of ",
           world_note(world, source), " runs --batch ", req.batch,
           " (dp must divide it) with the sizes given (tp ", size_or_auto(req.tp), ", pp ",
           size_or_auto(req.pp), ", dp ", size_or_auto(req.dp), ")");
  const TrainEstimate& best = plans[0];
  out = {best.plan.tp, best.plan.pp, best.plan.dp, best.plan.micro_batch};
  std::fprintf(stderr,
               "[train] auto sizes: the planner chose tp %d x pp %d x dp %d, micro-batch %d, of %s "
               "on cluster %s (%ld plans considered): predicted %.0f tokens/s, %s per rank%s\n",
               best.plan.tp, best.plan.pp, best.plan.dp, best.plan.micro_batch,
               world_note(world, source).c_str(), c.name.c_str(), considered, best.tokens_per_s,
               size_text(best.memory.total()).c_str(), best.fits ? "" : " (over the cluster's memory)");
  for (size_t i = 1; i < plans.size(); ++i) {
    const TrainPlan& p = plans[i].plan;
    if (p.tp == best.plan.tp && p.pp == best.plan.pp && p.dp == best.plan.dp) continue;
    std::fprintf(stderr, "[train] next: tp %d x pp %d x dp %d, %.0f tokens/s: %s\n", p.tp, p.pp,
                 p.dp, plans[i].tokens_per_s,
                 explain_train_loss(best, plans[i], c.memory_bytes).c_str());
    break;
  }
  return out;
}

}  // namespace tensorpar::cli

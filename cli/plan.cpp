// `tensorpar plan`: how to run a model on a cluster. Searches tp / pp / dp / ep / sp,
// micro-batch, interleave, recompute and ZeRO (train) or tp / pp / replicas (serve) with the
// cost model of src/plan, or evaluates one --fix'ed plan. docs/planner.md explains the numbers.
#include <sys/resource.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/auto_plan.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/threading.h"
#include "model/load_model.h"
#include "plan/calibrate.h"
#include "plan/plan_json.h"
#include "plan/published_runs.h"

namespace tensorpar::cli {

namespace {

using namespace tensorpar::plan;

struct PlanOptions {
  std::string model, cluster = "this-machine", mode = "train", fix, calibrate_out;
  int nodes = 0, devices = 0, top = 5;
  int64_t layers = 0, hidden = 0, heads = 0, kv_heads = 0, ffn = 0, vocab = 0, head_dim = 0;
  int64_t experts = 0, experts_per_token = 0;
  std::string mlp = "gated", precision = "bf16";
  int64_t global_batch = 0, seq = 0;
  TrainWorkload train;
  ServeWorkload serve;
  double slo_ttft_ms = 0, slo_itl_ms = 0, weight_bits = 0;
  bool json = false, validate = false, fit = false, tied = false;
};

ModelSpec model_from_options(const PlanOptions& o) {
  ModelSpec m;
  if (!o.model.empty()) {
    m = model_spec_from_config(read_model_config(o.model), o.model);
  } else {
    m.name = "flags";
    m.layers = o.layers;
    m.hidden = o.hidden;
    m.heads = o.heads;
    m.kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
    m.head_dim = o.head_dim > 0 ? o.head_dim : (o.heads > 0 ? o.hidden / o.heads : 0);
    m.ffn = o.ffn > 0 ? o.ffn : 4 * o.hidden;
    m.vocab = o.vocab;
    m.mlp = o.mlp == "plain" ? MlpMatrices::kPlain : MlpMatrices::kGated;
    m.tied_embeddings = o.tied;
  }
  if (o.experts > 0) {
    m.experts = o.experts;
    m.experts_per_token = o.experts_per_token;
  }
  m.validate("plan --model");
  return m;
}

// Runs this binary's own bench and returns its stdout.
std::string run_self(const std::string& args) {
  const std::string cmd = std::filesystem::read_symlink("/proc/self/exe").string() + " " + args;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(cmd.c_str(), "r"), pclose);
  TP_CHECK(pipe != nullptr, "[plan --calibrate] cannot run ", cmd);
  std::string out;
  std::array<char, 4096> buf{};
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe.get())) out.append(buf.data(), n);
  return out;
}

void run_calibrate(const PlanOptions& o) {
  const int devices = o.devices > 0 ? o.devices : 2;
  std::fprintf(stderr, "[plan] measuring: bench gemm --threads 1, bench comm --ranks %d\n",
               devices);
  // The process's fixed memory (code, libraries): what an idle binary holds, shared by the ranks
  // of one process (threads backend), so a rank's share is 1/devices of it.
  run_self("--version");
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  const double process_base = double(ru.ru_maxrss) * 1024;
  const std::string gemm = run_self("bench gemm --json --threads 1");
  std::fprintf(stderr, "[plan] measuring: bench gemm --quant --rows 1 --threads 1\n");
  const std::string quant = run_self("bench gemm --quant --json --threads 1 --rows 1");
  // Sequences of 64-256 tokens, 512 a problem: the curve's knee (half rate near 60 on the CPUs
  // measured), in about a second.
  std::fprintf(stderr, "[plan] measuring: bench attention --threads 1\n");
  const std::string attention =
      run_self("bench attention --json --threads 1 --tokens 512 --seq 64,128,256");
  const std::string comm =
      run_self("bench comm --json --threads-per-rank 1 --op all_reduce --ranks " +
               std::to_string(devices) + " --min-bytes 8 --max-bytes 16M");
  double mem_bw = 0;
  const auto comm_rows = parse_comm_bench(comm, &mem_bw);
  ClusterSpec c = calibrate_cluster(parse_gemm_bench(gemm, "f32"), comm_rows, mem_bw, devices,
                                    8.0 * 1024 * 1024 * 1024);
  fit_attention(c, parse_attention_bench(attention));
  // A decode step besides its weight stream: a small random Llama (64 wide, one head of 64, its
  // weights 0.11 MB a layer) at 4 and 12 layers and two contexts, one thread.
  // A host busy enough to make the fit meaningless (not positive) gets a second try, then the
  // serve model without these terms, said on stderr: the rest of the calibration stands.
  for (int attempt = 1;; ++attempt) {
    std::fprintf(stderr, "[plan] measuring: bench decode (a small random model, 3 shapes)\n");
    std::string decode;
    for (const char* shape : {"--layers 4 --context 16", "--layers 12 --context 16",
                              "--layers 12 --context 496"})
      decode += run_self(std::string("bench decode --json --threads-per-rank 1 --rows 1 --steps 16 "
                                     "--repeats 5 --hidden 64 --heads 1 --ffn 64 --vocab 256 ") +
                         shape);
    try {
      fit_decode(c, parse_decode_bench(decode));
      break;
    } catch (const Error& e) {
      if (attempt == 2) {
        std::fprintf(stderr, "[plan] %s; decode_layer_us and decode_attention_gflops left 0\n",
                     e.what());
        break;
      }
    }
  }
  c.reserved_bytes = process_base / devices;
  c.cores_per_node = int(available_cpus().size());  // ranks beyond them time-slice the cores
  c.weight_stream_Bps = parse_quant_stream_bench(quant);
  if (devices > 1) {
    // The ranks share this machine's memory bus: the same one-row streams with one thread per
    // rank give what all of them get together.
    const std::string threads = std::to_string(devices);
    std::fprintf(stderr, "[plan] measuring: bench gemm --rows 1 --threads %d (all ranks streaming)\n", devices);
    c.node_memory_Bps = fastest_weight_stream(parse_gemm_bench(run_self("bench gemm --json --rows 1 --threads " + threads), "f32"));
    c.node_weight_stream_Bps =
        parse_quant_stream_bench(run_self("bench gemm --quant --json --rows 1 --threads " + threads));
  }
  std::ofstream f(o.calibrate_out);
  TP_CHECK(f.good(), "[plan --calibrate] cannot write ", o.calibrate_out);
  f << cluster_to_json(c).dump(2) << "\n";
  std::printf("%s\n", cluster_to_json(c).dump(2).c_str());
}

void run_validate(const PlanOptions& o) {
  std::map<std::string, ClusterSpec> software;
  for (const char* source : {"narayanan2021", "korthikanti2022"}) {
    ClusterSpec c = published_cluster(source);
    if (o.fit) {
      c.eff = fit_efficiency(source);
      std::printf("fitted %s: gemm_max %.2f gemm_half_gflop %.3g dp_overlap %d tp_overlap %d\n",
                  source, c.eff.gemm_max, c.eff.gemm_half_flops * 1e-9, int(c.eff.dp_overlap),
                  int(c.eff.tp_overlap));
    }
    software[source] = c;
  }
  std::printf("%-16s %-7s %3s %3s %5s %5s %3s %2s %-9s %10s %10s %8s %s\n", "source", "model", "tp",
              "pp", "gpus", "batch", "mb", "v", "recompute", "published", "predicted", "error",
              "role");
  double sum[3] = {0, 0, 0}, max[3] = {0, 0, 0};  // calibration, held out 2021, 2022
  int n[3] = {0, 0, 0};
  for (const PublishedRun& r : published_runs()) {
    const RunCheck k = check_published_run(r, software.at(r.source));
    const int held = r.calibration ? 0 : r.source == "narayanan2021" ? 1 : 2;
    sum[held] += std::fabs(k.error);
    max[held] = std::max(max[held], std::fabs(k.error));
    ++n[held];
    std::printf("%-16s %-7s %3d %3d %5d %5d %3d %2d %-9s %10.2f %10.2f %+7.1f%% %s\n",
                r.source.c_str(), r.name.c_str(), r.tp, r.pp, r.gpus, r.global_batch,
                k.estimate.plan.micro_batch, k.estimate.plan.interleave,
                recompute_name(r.recompute), r.published, k.predicted, 100 * k.error,
                r.calibration ? "calibration" : "held out");
  }
  std::printf("\nKorthikanti 2022 Table 4, one 22B layer (tp 8, micro-batch 4), forward + "
              "backward ms:\n");
  double layer_sum = 0;
  for (const PublishedLayerTime& r : published_layer_times()) {
    const LayerCheck k = check_published_layer(r, software.at("korthikanti2022"));
    layer_sum += std::fabs(k.error);
    std::printf("  %-16s published %5.1f predicted %5.1f %+6.1f%% calibration\n", r.name.c_str(),
                r.ms, k.predicted_ms, 100 * k.error);
  }
  std::printf("\nNarayanan 2021 calibration rows: mean |error| %.1f%%, max %.1f%%\n",
              100 * sum[0] / n[0], 100 * max[0]);
  std::printf("Korthikanti 2022 Table 4 (calibration): mean |error| %.1f%%\n",
              100 * layer_sum / double(published_layer_times().size()));
  std::printf("held-out Narayanan 2021 rows: mean |error| %.1f%%, max %.1f%%\n",
              100 * sum[1] / n[1], 100 * max[1]);
  std::printf("held-out Korthikanti 2022 rows (Table 5): mean |error| %.1f%%, max %.1f%%\n",
              100 * sum[2] / n[2], 100 * max[2]);
}

void print_train(const std::vector<TrainEstimate>& plans, const ClusterSpec& c,
                 const PlanOptions& o, long considered) {
  const size_t k = std::min(plans.size(), size_t(std::max(o.top, 1)));
  if (o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (size_t i = 0; i < k; ++i) {
      nlohmann::json j = train_estimate_json(plans[i]);
      if (i > 0) j["why_slower"] = explain_train_loss(plans[0], plans[i], c.memory_bytes);
      arr.push_back(j);
    }
    std::cout << nlohmann::json{{"plans", arr}, {"considered", considered}}.dump() << "\n";
    return;
  }
  std::printf("%ld valid plans on %s (%d devices); best %zu:\n", considered, c.name.c_str(),
              c.world(), k);
  std::printf("%3s %3s %3s %3s %2s %3s %3s %-9s %4s %9s %9s %11s %8s %6s\n", "tp", "pp", "dp", "ep",
              "sp", "mb", "v", "recompute", "zero", "mem GiB", "step s", "tokens/s", "TFLOP/s",
              "MFU");
  for (size_t i = 0; i < k; ++i) {
    const TrainEstimate& e = plans[i];
    const TrainPlan& p = e.plan;
    std::printf("%3d %3d %3d %3d %2s %3d %3d %-9s %4d %9.2f %9.4f %11.1f %8.2f %5.1f%%%s\n", p.tp,
                p.pp, p.dp, p.ep, p.sp ? "on" : "-", p.micro_batch, p.interleave,
                recompute_name(p.recompute), p.zero, e.memory.total() / (1 << 30), e.step_time_s,
                e.tokens_per_s, e.hardware_flops_per_device * 1e-12, 100 * e.mfu,
                e.fits ? "" : "  (does not fit)");
    if (i > 0)
      std::printf("    why slower: %s\n", explain_train_loss(plans[0], e, c.memory_bytes).c_str());
  }
  const TrainEstimate& b = plans[0];
  std::printf(
      "\nbest plan breakdown: memory GiB weights %.2f grads %.2f optimizer %.2f activations %.2f "
      "reserved %.2f\n  time s: gemm %.4f attention %.4f elementwise %.4f tp_comm %.4f ep_comm "
      "%.4f "
      "pp_comm %.4f bubble %.4f dp_comm %.4f optimizer %.4f\n",
      b.memory.weights / (1 << 30), b.memory.grads / (1 << 30), b.memory.optimizer / (1 << 30),
      b.memory.activations / (1 << 30), b.memory.reserved / (1 << 30), b.time.gemm,
      b.time.attention, b.time.elementwise, b.time.tp_comm, b.time.ep_comm, b.time.pp_comm,
      b.time.bubble, b.time.dp_comm, b.time.optimizer);
}

void print_serve(const std::vector<ServeEstimate>& plans, const ClusterSpec& c,
                 const PlanOptions& o) {
  const size_t k = std::min(plans.size(), size_t(std::max(o.top, 1)));
  if (o.json) {
    nlohmann::json arr = nlohmann::json::array();
    for (size_t i = 0; i < k; ++i) {
      nlohmann::json j = serve_estimate_json(plans[i]);
      if (i > 0) j["why_slower"] = explain_serve_loss(plans[0], plans[i]);
      arr.push_back(j);
    }
    std::cout << nlohmann::json{{"plans", arr}}.dump() << "\n";
    return;
  }
  std::printf("serve plans on %s (%d devices); best %zu:\n", c.name.c_str(), c.world(), k);
  std::printf("%3s %3s %8s %9s %9s %9s %8s %8s %11s %s\n", "tp", "pp", "replicas", "mem GiB",
              "TTFT ms", "ITL ms", "max conc", "conc", "tokens/s", "SLO");
  for (size_t i = 0; i < k; ++i) {
    const ServeEstimate& e = plans[i];
    std::printf("%3d %3d %8d %9.2f %9.2f %9.3f %8lld %8lld %11.1f %s\n", e.plan.tp, e.plan.pp,
                e.plan.replicas, e.memory_bytes / (1 << 30), e.ttft_s * 1e3, e.itl_s * 1e3,
                (long long)e.max_concurrency, (long long)e.concurrency, e.tokens_per_s,
                e.meets_slo ? "met" : "missed");
    if (i > 0) std::printf("    why slower: %s\n", explain_serve_loss(plans[0], e).c_str());
  }
}

void run_plan(PlanOptions& o) {
  if (!o.calibrate_out.empty()) return run_calibrate(o);
  if (o.validate) return run_validate(o);
  TP_CHECK(!o.model.empty() || o.layers > 0,
           "[plan] give --model PATH or --layers/--hidden/--heads/--vocab");
  const ModelSpec m = model_from_options(o);
  ClusterSpec c = resolve_cluster(o.cluster, o.nodes);
  if (o.devices > 0) c.devices_per_node = o.devices;
  if (o.mode == "serve") {
    o.serve.slo_ttft_s = o.slo_ttft_ms * 1e-3;
    o.serve.slo_itl_s = o.slo_itl_ms * 1e-3;
    if (o.weight_bits > 0) {
      o.serve.weight_bytes = o.weight_bits / 8;
    } else if (!o.model.empty()) {  // the file's own types and bytes
      const WeightFormat wf = weight_format_of(o.model, "auto", m);
      o.serve.weight_bytes = wf.bytes_per_parameter, o.serve.weight_format_shares = wf.shares;
    }
    ServeConstraints pin;
    if (!o.fix.empty()) {
      const TrainConstraints f = parse_fixed_plan(o.fix);
      pin.tp = f.tp, pin.pp = f.pp;
    }
    const auto plans = search_serve(m, c, o.serve, pin);
    TP_CHECK(!plans.empty(), "[plan] no valid serve plan on ", c.name);
    return print_serve(plans, c, o);
  }
  if (o.precision == "f32") {  // tensorpar's default CPU training: f32 everywhere, no master copy
    o.train.weight_bytes = 4, o.train.grad_bytes = 4, o.train.optimizer_bytes = 8;
    o.train.activation_bytes = 4;
  }
  o.train.global_batch = o.global_batch > 0 ? o.global_batch : 8L * c.world();
  o.train.seq = o.seq > 0 ? o.seq : std::min<int64_t>(2048, 4 * m.hidden);
  TrainConstraints pin;
  if (!o.fix.empty()) {
    pin = parse_fixed_plan(o.fix);
    const long tp_pp = long(std::max(pin.tp, 1)) * std::max(pin.pp, 1);
    if (pin.dp == 0 && c.world() % tp_pp == 0) pin.dp = int(c.world() / tp_pp);  // the rest
    TrainPlan p{std::max(pin.tp, 1),
                std::max(pin.pp, 1),
                std::max(pin.dp, 1),
                std::max(pin.ep, 1),
                pin.sp == 1,
                std::max(pin.micro_batch, 1),
                std::max(pin.interleave, 1),
                pin.recompute.empty() ? Recompute::kNone : parse_recompute(pin.recompute),
                std::max(pin.zero, 0)};
    const std::string problem = train_plan_problem(m, c, o.train, p);
    TP_CHECK(problem.empty(), "[plan --fix] ", o.fix, ": ", problem);
    return print_train({estimate_train(m, c, o.train, p)}, c, o, 1);
  }
  long considered = 0;
  const auto plans = search_train(m, c, o.train, pin, &considered);
  TP_CHECK(!plans.empty(), "[plan] no valid training plan for global batch ", o.train.global_batch,
           " on ", c.world(), " devices");
  print_train(plans, c, o, considered);
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* cmd = app.add_subcommand("plan",
                                     "Choose tp / pp / dp / ep / sp, micro-batch and recompute "
                                     "for a model on a cluster (cost model: docs/planner.md)");
  cmd->add_option("--model", o->model,
                  "GGUF file or Hugging Face directory (or give the size flags)");
  cmd->add_option("--layers", o->layers, "Layers")->check(CLI::Range(1, 100000));
  cmd->add_option("--hidden", o->hidden, "Hidden size")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--heads", o->heads, "Attention heads")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--kv-heads", o->kv_heads, "KV heads (default: heads)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--head-dim", o->head_dim, "Head size (default: hidden / heads)")
      ->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--ffn", o->ffn, "MLP inner size (default 4 x hidden)")
      ->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--vocab", o->vocab, "Vocabulary size")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--mlp", o->mlp, "gated (SwiGLU) | plain (GELU)")
      ->check(CLI::IsMember({"gated", "plain"}));
  cmd->add_flag("--tied", o->tied, "The LM head shares the embedding (size flags)");
  cmd->add_option("--experts", o->experts, "MoE experts")->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--experts-per-token", o->experts_per_token, "MoE experts per token")
      ->check(CLI::Range(0, 1 << 16));
  cmd->add_option("--cluster", o->cluster,
                  "Cluster JSON file or preset: dgx-a100-80g | dgx-h100 | h200x8 | this-machine");
  cmd->add_option("--nodes", o->nodes, "Override the cluster's node count")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--devices", o->devices, "Override devices per node (ranks on this machine)")
      ->check(CLI::Range(1, 1024));
  cmd->add_option("--mode", o->mode, "train | serve")->check(CLI::IsMember({"train", "serve"}));
  cmd->add_option("--global-batch", o->global_batch,
                  "Sequences per iteration (default 8 x devices)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  cmd->add_option("--seq", o->seq, "Tokens per sequence (default min(2048, 4 x hidden))")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  cmd->add_option("--grad-bytes", o->train.grad_bytes,
                  "Gradient bytes per parameter (4 fp32, 2 bf16)")
      ->check(CLI::IsMember({2.0, 4.0}));
  cmd->add_option("--precision", o->precision,
                  "Train: bf16 (mixed precision, 18 B/param) | f32 (16 B/param)")
      ->check(CLI::IsMember({"bf16", "f32"}));
  cmd->add_option("--prompt-tokens", o->serve.prompt_tokens, "Serve: prompt length")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  cmd->add_option("--output-tokens", o->serve.output_tokens, "Serve: generated tokens")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 24));
  cmd->add_option("--weight-bits", o->weight_bits,
                  "Serve: bits per weight (default 16; a GGUF file: its size)")
      ->check(CLI::Range(1.0, 32.0));
  cmd->add_option("--slo-ttft-ms", o->slo_ttft_ms, "Serve: time-to-first-token target")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--slo-itl-ms", o->slo_itl_ms, "Serve: inter-token latency target")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--concurrency", o->serve.concurrency,
                  "Serve: sequences per replica (default: the most within memory and SLO)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
  cmd->add_option("--fix", o->fix,
                  "Evaluate one plan: "
                  "tp=8,pp=8,dp=1,micro_batch=1,recompute=selective,sp=on,interleave=3,zero=0");
  cmd->add_option("--top", o->top, "Plans to print")->check(CLI::Range(1, 1000));
  cmd->add_option("--calibrate", o->calibrate_out,
                  "Measure this machine with bench gemm / comm and write a cluster file");
  cmd->add_flag("--validate", o->validate,
                "Predict the published runs (docs/planner.md) and print the error per row");
  cmd->add_flag("--fit", o->fit,
                "With --validate: refit the efficiencies on the calibration rows first");
  cmd->add_flag("--json", o->json, "One JSON object: {\"plans\": [...]}");
  cmd->callback([o] { run_plan(*o); });
}

}  // namespace tensorpar::cli

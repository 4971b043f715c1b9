// `tensorpar train`: trains a model built from flags (or loaded from an HF directory / GGUF file
// to fine-tune) on a text corpus at any tp x pp x dp, printing step, loss, val loss, tokens/s, ms/step
// (or one JSON object per step), with sharded checkpoints and --resume. A resumed run keeps the
// checkpoint's settings and saves into its directory unless flags say otherwise; no run writes
// over a newer checkpoint. Logic lives in src/train/.
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/auto_plan.h"
#include "cli/commands.h"
#include "cli/launch_checks.h"
#include "cli/run_model.h"
#include "comm/launch.h"
#include "comm/timed_communicator.h"
#include "core/error.h"
#include "io/sharded_checkpoint.h"
#include "model/load_model.h"
#include "model/transformer.h"
#include "model/tokenizer_loader.h"
#include "parallel/mesh.h"
#include "serve/metrics_endpoint.h"
#include "train/hf_export.h"
#include "train/memory_accounting.h"
#include "train/pipeline.h"
#include "train/pipeline_schedule.h"
#include "train/run_settings.h"
#include "train/train_metrics.h"
#include "train/trainer.h"

namespace tensorpar::cli {
namespace {
namespace fs = std::filesystem;

struct TrainCliOptions {
  CommonOptions common;
  std::string model, arch = "llama", vocab_from, resume;
  int64_t layers = 4, hidden = 256, heads = 8, kv_heads = 0, ffn = 0, experts = 0, experts_per_token = 2;
  RunSettings run;
  uint64_t init_seed = 1;
  bool bf16 = false;
  int dp = 1, pp = 1, zero = 0;
  double dp_bucket_mb = 4;  // 0: no overlap
  bool sequence_parallel = false;
  std::vector<int64_t> pp_layers;  // layers per pipeline stage (empty: even)
  int pp_virtual = 1;              // model chunks per pipeline stage (interleaved schedule)
  std::set<std::string> given;  // flags on the command line, without "--"
  std::string on_divergence = "stop";
  int metrics_port = -1;  // -1: no metrics endpoint
  std::string metrics_host = "127.0.0.1";
};

// Flags that shape a new model; a resumed run's model comes from its checkpoint.
const char* const kModelShapeFlags[] = {"arch", "layers", "hidden", "heads", "kv-heads", "ffn", "experts",
                                        "experts-per-token"};

ModelConfig config_from_flags(const TrainCliOptions& o, int64_t vocab) {
  ModelConfig c;
  const int64_t kv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  c.vocab_size = vocab;
  c.hidden = o.hidden;
  c.n_layers = o.layers;
  c.n_heads = o.heads;
  c.head_dim = o.heads > 0 ? o.hidden / o.heads : 0;
  c.max_position = o.run.train.seq;
  c.norm_eps = 1e-5;
  if (o.arch == "gpt2") {
    c.model_type = "gpt2";
    c.family = ArchFamily::kGpt2;
    c.n_kv_heads = o.heads;
    c.ffn = o.ffn > 0 ? o.ffn : 4 * o.hidden;
    c.tie_embeddings = true;
  } else {
    c.model_type = "llama";
    c.n_kv_heads = kv;
    c.ffn = o.ffn > 0 ? o.ffn : (8 * o.hidden / 3 + 63) / 64 * 64;
    c.tie_embeddings = true;
    if (o.experts > 0) {  // a Mixtral: every layer's MLP is experts of size --ffn
      TP_CHECK(o.experts_per_token >= 1 && o.experts_per_token <= o.experts, "[train] --experts-per-token ",
               o.experts_per_token, ", expected in [1, --experts ", o.experts, "]");
      c.model_type = "mixtral";
      c.moe.n_experts = o.experts;
      c.moe.top_k = o.experts_per_token;
      c.moe.expert_ffn = c.ffn;
      c.moe.norm_topk = true;
      c.moe.layer_moe.assign(size_t(c.n_layers), true);
      c.moe.aux_loss_coef = 0.02;
    }
  }
  c.validate("--arch flags");
  return c;
}

// MoE: the busiest expert's share of the routed slots over the mean share, worst over the MoE
// layers (1 = perfectly balanced).
double expert_imbalance(const std::vector<std::vector<double>>& load) {
  double worst = 0;
  for (const std::vector<double>& l : load) {
    double sum = 0, mx = 0;
    for (double v : l) sum += v, mx = std::max(mx, v);
    if (sum > 0) worst = std::max(worst, mx * double(l.size()) / sum);
  }
  return worst;
}

void print_incident(const StepLog& l, bool json) {
  const Incident& i = *l.incident;
  if (json) {
    nlohmann::json j = {{"incident",
                         {{"step", l.step},
                          {"batch", i.batch},
                          {"reason", i.reason},
                          {"loss", l.loss},
                          {"grad_norm", l.grad_norm},
                          {"action", "rollback"},
                          {"rolled_back_to", i.rolled_back_to},
                          {"skipped_batches", i.skipped_batches}}}};
    if (std::isfinite(i.running_mean)) j["incident"]["running_mean"] = i.running_mean;
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::fprintf(stderr, "[train] incident at step %lld (batch %lld): %s; rolled back to %s, skipping batch %lld\n",
                 (long long)l.step, (long long)i.batch, i.reason.c_str(), i.rolled_back_to.c_str(),
                 (long long)i.batch);
  }
  std::fflush(stdout);
}

// On stderr whatever the format: stdout under --json stays one object per step or incident.
void print_summary(const Trainer& t, int64_t start_step, double wall_s, double collective_s) {
  const RunTotals& r = t.totals();
  std::string skipped;
  for (int64_t b : t.skipped_batches()) skipped += (skipped.empty() ? "" : ",") + std::to_string(b);
  std::fprintf(stderr,
               "[train] done: step %lld -> %lld, %lld optimizer steps, %lld incidents (%lld rollbacks), batches "
               "skipped: %s, %lld checkpoints written, %.1f s (rank 0: %.1f s in collectives)\n",
               (long long)start_step, (long long)t.step(), (long long)r.optimizer_steps, (long long)r.incidents,
               (long long)r.rollbacks, skipped.empty() ? "none" : skipped.c_str(), (long long)r.checkpoints, wall_s,
               collective_s);
}

void print_step(const StepLog& l, const std::string& saved, bool json) {
  if (l.incident) return print_incident(l, json);
  if (json) {
    nlohmann::json j = {{"step", l.step},      {"loss", l.loss}, {"tokens_per_s", l.tokens_per_s},
                        {"ms_per_step", l.ms}, {"lr", l.lr},     {"grad_norm", l.grad_norm}};
    if (l.val_loss) j["val_loss"] = *l.val_loss;
    j["activation_bytes"] = l.activation_bytes;
    if (!l.comm_s.empty()) {
      // The step-time breakdown: seconds in each group's communication, the rest compute.
      nlohmann::json comm = nlohmann::json::object();
      double in_comm = 0;
      for (const auto& [group, s] : l.comm_s) comm[group] = s, in_comm += s;
      j["comm_s"] = comm;
      j["compute_s"] = l.ms / 1000 - in_comm;
    }
    if (l.dp_exposed_s > 0 || l.dp_buckets > 0) {
      // How much of the data-parallel gradient reduction backward hid (--dp-bucket-mb).
      j["dp_reduce"] = {{"exposed_s", l.dp_exposed_s},
                        {"bucket_s", l.dp_bucket_s},
                        {"buckets", l.dp_buckets},
                        {"buckets_during_backward", l.dp_buckets_during_backward}};
    }
    if (!l.expert_load.empty()) j["expert_load"] = l.expert_load;
    if (!saved.empty()) j["checkpoint"] = saved;
    if (!l.removed_checkpoints.empty()) j["removed_checkpoints"] = l.removed_checkpoints;
    std::printf("%s\n", j.dump().c_str());
  } else {
    char val[32] = "";
    if (l.val_loss) std::snprintf(val, sizeof(val), " | val %.4f", double(*l.val_loss));
    char moe[40] = "";
    if (!l.expert_load.empty())
      std::snprintf(moe, sizeof(moe), " | expert load max/mean %.2f", expert_imbalance(l.expert_load));
    std::printf("step %5lld | loss %.4f%s | lr %.2e | norm %.3f | %8.0f tok/s | %7.1f ms%s\n",
                (long long)l.step, double(l.loss), val, double(l.lr), l.grad_norm, l.tokens_per_s,
                l.ms, moe);
    std::fflush(stdout);  // the step's line first, then the note about its checkpoint
    if (!saved.empty()) std::fprintf(stderr, "[train] saved checkpoint %s\n", saved.c_str());
    for (const std::string& gone : l.removed_checkpoints)
      std::fprintf(stderr, "[train] removed checkpoint %s (retention: --keep-last/--keep-every)\n",
                   gone.c_str());
  }
  std::fflush(stdout);
}

// The checkpoint directory `root/latest` names when it is step-<step>: the save of this step.
std::string saved_at(const std::string& root, int64_t step) {
  std::ifstream f(fs::path(root) / "latest");
  std::string name;
  if (!f || !std::getline(f, name) || name != "step-" + std::to_string(step)) return "";
  return (fs::path(root) / name).string();
}

bool same_dir(const std::string& a, const std::string& b) {
  std::error_code ec;
  return fs::weakly_canonical(a, ec) == fs::weakly_canonical(b, ec);
}

// Settings from --resume's checkpoint, the save directory, and the checks that keep work from
// being lost. Returns the step training starts from (0 for a new run).
int64_t settle_run(TrainCliOptions& o, const nlohmann::json& resume_state,
                   std::string& resume_note) {
  RunSettings& run = o.run;
  int64_t start = 0;
  if (!o.resume.empty()) {
    for (const char* f : kModelShapeFlags)
      TP_CHECK(!o.given.count(f), "[train] --", f, " shapes a new model, but --resume ", o.resume,
               " continues the checkpoint's model: drop --", f);
    start = resume_state.value("step", int64_t(0));
    if (resume_state.contains("run")) {
      const std::string changes = apply_saved_settings(resume_state["run"], o.given, run);
      resume_note = "settings from the checkpoint" +
                    (changes.empty() ? "" : "; changed by flags: " + changes);
    } else {  // a checkpoint from before runs recorded their settings
      if (!o.given.count("data")) run.data = resume_state.value("data", std::string());
      resume_note =
          "the checkpoint records no run settings: batch, seq, bf16 and the schedule follow the "
          "flags";
    }
    if (!o.given.count("out")) run.train.out_dir = checkpoint_root(o.resume);
    TP_CHECK(run.train.steps > start, "[train] ", o.resume, " is at step ", start,
             " and --steps is ", run.train.steps, ": nothing to train; pass --steps N with N > ",
             start);
  }
  const std::string& out = run.train.out_dir;
  if (!out.empty()) {
    const int64_t latest = latest_checkpoint_step(out);
    TP_CHECK(latest < 0 || o.resume.empty() || latest <= start, "[train] ", out,
             "/latest is at step ", latest, ", past the resumed step ", start,
             ": saving there would move latest back; pass --out NEW_DIR");
    TP_CHECK(latest < 0 || (!o.resume.empty() && same_dir(out, checkpoint_root(o.resume))),
             "[train] --out ", out, " already holds a run (latest: step ", latest,
             "): continue it with --resume ", out, ", or pass another --out");
  }
  return start;
}

void run_train(TrainCliOptions& o) {
  check_launch(o.common, "train");
  nlohmann::json resume_state;
  if (!o.resume.empty()) {
    TP_CHECK(fs::exists(o.resume), "[train] --resume ", o.resume, ": no such directory");
    resume_state = read_checkpoint_state(o.resume);
  }
  o.run.train.compute.matmul_dtype = o.bf16 ? DType::kBF16 : DType::kF32;
  std::string resume_note;
  const int64_t start_step = settle_run(o, resume_state, resume_note);
  RunSettings& run = o.run;
  check_retention(run.train.retention);
  std::string tok_path = !o.vocab_from.empty() ? o.vocab_from : o.model;
  if (tok_path.empty() && resume_state.contains("tokenizer"))
    tok_path = resume_state["tokenizer"].get<std::string>();
  TP_CHECK(!tok_path.empty(),
           "[train] no tokenizer: pass --vocab-from TOKENIZER (HF dir, GGUF or tokenizer.json) or "
           "--model");
  TP_CHECK(!run.data.empty(), "[train] no training text: pass --data FILE|DIR");
  if (o.common.tp == kAutoSize || o.dp == kAutoSize || o.pp == kAutoSize) {
    const ModelConfig config =
        !o.model.empty()    ? read_model_config(o.model)
        : !o.resume.empty() ? stored_model_config(resume_state, o.resume)
                            : config_from_flags(o, load_tokenizer(tok_path).vocab_size());
    TrainSizeRequest req;
    req.tp = o.common.tp, req.dp = o.dp, req.ep = o.common.ep;
    req.pp = o.pp == kAutoSize && !o.pp_layers.empty() ? int(o.pp_layers.size()) / o.pp_virtual : o.pp;
    req.interleave = o.pp_virtual;
    req.batch = run.train.batch, req.seq = run.train.seq, req.micro_batch = run.train.micro_batch;
    req.recompute_layers = run.train.compute.recompute_layers;
    req.pipeline_allowed = o.model.empty() && o.common.ep == 1;
    req.zero = o.zero;
    req.sequence_parallel = o.sequence_parallel;
    req.dp_buckets = o.dp_bucket_mb > 0;
    const TrainSizes sizes = resolve_train_sizes(o.common, config, req);
    o.common.tp = sizes.tp, o.pp = sizes.pp, o.dp = sizes.dp;
    run.train.micro_batch = sizes.micro_batch;
  }
  TP_CHECK(fs::exists(run.data), "[train] --data ", run.data, ": no such file or directory");
  TP_CHECK(o.pp_virtual == 1 || o.pp > 1, "[train] --pp-virtual ", o.pp_virtual,
           " interleaves model chunks over pipeline stages: it needs --pp 2 or more");

  LaunchConfig lc;
  lc.backend = backend_from_name(o.common.backend);
  lc.n_ranks = o.common.tp * o.dp * o.pp;
  lc.threads_per_rank = o.common.threads_per_rank;
  launch_ranks(lc, [&](Communicator& world) {
    // Under mpirun without --tp/--dp/--pp the whole world is one TP group.
    const bool whole_world =
        is_mpi_job(lc.backend) && o.common.tp == 1 && o.dp == 1 && o.pp == 1;
    const int tp_size = whole_world ? world.size() : o.common.tp;
    TP_CHECK(tp_size * o.dp * o.pp == world.size(), "[train] --tp ", tp_size, " x --dp ", o.dp,
             " x --pp ", o.pp, " does not match the MPI world of ", world.size(),
             " ranks (mpirun -np ", tp_size * o.dp * o.pp, ")");
    // World rank = tp_rank + tp * (dp_rank + dp * pp_rank): a TP group is tp consecutive ranks.
    // Training carves expert parallelism out of data parallelism (Megatron): --ep consecutive DP
    // ranks hold different experts and exchange tokens by all_to_all.
    TP_CHECK(o.common.ep == 1 || (o.dp % o.common.ep == 0 && o.pp == 1), "[train] --ep ", o.common.ep,
             " spreads experts over data-parallel ranks: --dp (", o.dp, ") must be a multiple of it",
             o.pp > 1 ? ", and pipeline stages (--pp) are not supported with it yet" : "");
    // Every group's collectives are timed (the summary, --metrics-port).
    TimedCommunicator timed(world);
    DeviceMesh mesh(timed, {.tp = tp_size, .dp = o.dp, .pp = o.pp, .ep = o.common.ep});
    const ExpertParallel experts{1, o.common.ep > 1 ? &mesh.ep() : nullptr};
    // Each group timed on its own too: the step-time breakdown (StepLog::comm_s).
    TimedCommunicator tp_timed(mesh.tp()), pp_timed(mesh.pp()), dp_timed(mesh.dp());
    Communicator& tp = tp_timed;
    const bool lead = world.rank() == 0;
    // Rank 0 reads and tokenises the corpus; the others receive it.
    TokenCorpus corpus;
    int64_t vocab = 0;
    if (lead) {
      const auto t0 = std::chrono::steady_clock::now();
      const Tokenizer tok = load_tokenizer(tok_path);
      vocab = tok.vocab_size();
      corpus = tokenize_corpus(list_text_files(run.data), tok, run.val_fraction, run.train.seq);
      if (run.max_data_tokens > 0 && int64_t(corpus.train.size()) > run.max_data_tokens)
        corpus.train.resize(size_t(run.max_data_tokens));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(
          stderr,
          "[train] %s: %zu train + %zu validation tokens (vocab %lld), tokenised in %.1f s\n",
          run.data.c_str(), corpus.train.size(), corpus.val.size(), (long long)vocab, s);
    }
    world.broadcast(&vocab, 1, DType::kI64, 0);
    broadcast_corpus(corpus, world);

    std::unique_ptr<CausalLM> model;
    const ModelConfig config = !o.model.empty()    ? read_model_config(o.model)
                               : !o.resume.empty() ? stored_model_config(resume_state, o.resume)
                                                   : config_from_flags(o, vocab);
    check_tp_size(tp.size(), config, "train");
    std::unique_ptr<Pipeline> pipeline;
    std::vector<std::unique_ptr<Transformer>> chunks;  // a pipeline stage's model chunks
    if (o.pp > 1) {
      // This rank's stage: its layers (and the embedding / head at the ends), initialised from
      // --init-seed like the whole model, or read from the checkpoint when resumed.
      TP_CHECK(o.model.empty(), "[train] --pp ", o.pp,
               " trains a new model or resumes a checkpoint; fine-tuning --model ", o.model,
               " through a pipeline is not supported yet (use --pp 1)");
      // --pp-virtual V: V chunks per stage, chunk v the layers of virtual stage v * pp + stage.
      for (const LayerSpan& span :
           interleaved_layer_spans(config.n_layers, o.pp, o.pp_virtual, mesh.pp_rank(), o.pp_layers)) {
        chunks.push_back(std::make_unique<Transformer>(config, tp, 32, span));
        chunks.back()->init_weights(o.init_seed);
      }
      std::vector<Transformer*> held;
      for (auto& c : chunks) held.push_back(c.get());
      pipeline = std::make_unique<Pipeline>(held, pp_timed);
    } else if (!o.pp_layers.empty()) {
      split_layers(config.n_layers, 1, o.pp_layers);  // names a bad list; one count is the model
    } else if (!o.model.empty()) {
      LoadOptions lo;
      lo.keep_quantized = false;  // quantized GGUF weights are dequantized to f32 to train
      model = load_model(o.model, tp, lo, experts);
    } else {
      // Resumed: every parameter comes from the checkpoint, whose config (any RoPE layout) is
      // stored in it. New: initialised from --init-seed.
      model = init_model(config, tp, o.init_seed, experts);
    }
    // The model the trainer steps: the whole one, or this stage's first chunk (the pipeline
    // holds them all).
    CausalLM& lm = pipeline ? static_cast<CausalLM&>(pipeline->chunk(0)) : *model;
    TP_CHECK(lm.config().vocab_size >= vocab, "[train] the tokenizer has ", vocab,
             " tokens but the model's vocabulary only ", lm.config().vocab_size);
    RunSettings effective = run;
    // Without --seq, a loaded model with fewer positions trains at its own length.
    if (!o.given.count("seq"))
      effective.train.seq = std::min(run.train.seq, lm.config().max_position);
    TrainOptions topt = effective.train;
    topt.distributed_optimizer = o.zero == 1;
    topt.dp_bucket_bytes = int64_t(o.dp_bucket_mb * 1024 * 1024);
    topt.compute.sequence_parallel = o.sequence_parallel;
    // Test hook (docs/reliability.md): TENSORPAR_POISON_BATCH=batch:N,kind:nan|spike.
    if (const char* poison = std::getenv("TENSORPAR_POISON_BATCH"); poison && *poison)
      topt.poison = parse_poisoned_batch(poison);
    topt.extra_state = {
        {"tokenizer", tok_path}, {"data", run.data}, {"run", run_settings_json(effective)}};
    Trainer trainer(lm, corpus, topt, o.dp > 1 ? &dp_timed : nullptr, pipeline.get(),
                    experts.dispatch, experts.dispatch ? &mesh.edp() : nullptr);
    trainer.time_groups({{"tp", &tp_timed}, {"pp", &pp_timed}, {"dp", &dp_timed}});
    if (!o.resume.empty()) {
      const std::string schedule_note = trainer.resume(o.resume);
      if (lead)
        std::fprintf(
            stderr, "[train] resuming %s at step %lld: %s%s%s; saving into %s\n",
            resolve_checkpoint_dir(o.resume).c_str(), (long long)start_step, resume_note.c_str(),
            resume_state.contains("run") || schedule_note.empty() ? "" : "; ",
            resume_state.contains("run") ? "" : schedule_note.c_str(), topt.out_dir.c_str());
    }
    const TrainMemoryReport mem =
        train_memory_report(pipeline ? pipeline->model_parameters() : lm.parameters(), tp, experts.dispatch,
                            o.zero && o.dp > 1 ? o.dp : 1);
    if (lead) {
      std::fprintf(
          stderr,
          "[train] %s, %s, tp %d%s, pp %d, dp %d, ep %d (world %s); matmuls %s; recomputed layers %lld; "
          "from step %lld\n",
          lm.config().summary().c_str(), mem.summary().c_str(), tp.size(),
          o.sequence_parallel ? " (sequence parallel)" : "", o.pp, o.dp, o.common.ep, world.name().c_str(),
          topt.compute.matmul_dtype == DType::kBF16 ? "bf16" : "f32",
          (long long)std::min(topt.compute.recompute_layers, lm.config().n_layers),
          (long long)trainer.step());
      if (topt.out_dir.empty())
        std::fprintf(stderr, "[train] no --out: this run saves no checkpoint\n");
    }
    // --metrics-port: world rank 0 serves GET /metrics; every rank's collective seconds reach it
    // by one all_gather per step.
    std::unique_ptr<TrainMetrics> metrics;
    std::unique_ptr<MetricsEndpoint> endpoint;
    if (o.metrics_port >= 0 && lead) {
      metrics = std::make_unique<TrainMetrics>(world.size(), topt.batch * topt.seq);
      endpoint = std::make_unique<MetricsEndpoint>(o.metrics_host, o.metrics_port,
                                                   [m = metrics.get()] { return m->render_prometheus(); });
      std::fprintf(stderr, "[train] metrics on http://%s:%d/metrics\n", o.metrics_host.c_str(), endpoint->port());
    }
    std::vector<double> collective_s(size_t(world.size()));
    const auto t0 = std::chrono::steady_clock::now();
    trainer.run([&](const StepLog& l) {
      if (o.metrics_port >= 0) {
        const double mine = timed.seconds();
        world.all_gather(&mine, collective_s.data(), int64_t(sizeof(double)), DType::kU8);
      }
      if (!lead) return;
      print_step(l, topt.out_dir.empty() || l.incident ? "" : saved_at(topt.out_dir, l.step), o.common.json);
      if (metrics) {
        metrics->record(l, trainer.totals());
        metrics->set_collective_seconds(collective_s);
      }
    });
    if (lead)
      print_summary(trainer, start_step,
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), timed.seconds());
  });
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainCliOptions>();
  TrainOptions& t = o->run.train;
  CLI::App* cmd =
      app.add_subcommand("train", "Train (or fine-tune) a model with tensor, pipeline and data parallelism");
  add_common_options(*cmd, o->common);
  cmd->add_option("--model", o->model,
                  "Fine-tune this HF directory or GGUF file (quantized weights are dequantized)");
  cmd->add_option("--arch", o->arch, "New model: llama | gpt2")
      ->check(CLI::IsMember({"llama", "gpt2"}));
  cmd->add_option("--layers", o->layers, "New model: layers")->check(CLI::Range(1, 1024));
  cmd->add_option("--hidden", o->hidden, "New model: hidden size")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--heads", o->heads, "New model: attention heads")->check(CLI::Range(1, 1024));
  cmd->add_option("--kv-heads", o->kv_heads, "New model: kv heads (llama; 0 = heads)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--ffn", o->ffn, "New model: MLP size (0 = llama 8/3 C rounded to 64, gpt2 4 C)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--experts", o->experts,
                  "New model: a mixture of experts (llama arch, written as Mixtral) with this many experts of "
                  "size --ffn per layer (0 = dense)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--experts-per-token", o->experts_per_token, "New MoE model: experts each token is routed to")
      ->check(CLI::Range(1, 4096));
  cmd->add_option(
         "--seq", t.seq,
         "Tokens per sequence (also a new model's max positions; at most a loaded model's)")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--vocab-from", o->vocab_from,
                  "Tokenizer: HF directory, GGUF file or tokenizer.json");
  cmd->add_option("--data", o->run.data,
                  "Text file, or a directory of text files (fortune files: *.dat skipped)");
  cmd->add_option("--val-fraction", o->run.val_fraction,
                  "Last fraction of the tokens held out for validation")
      ->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--max-data-tokens", o->run.max_data_tokens,
                  "Use at most this many training tokens (0 = all)");
  cmd->add_option("--batch", t.batch, "Sequences per optimizer step")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--micro-batch", t.micro_batch,
                  "Sequences per forward/backward (divides --batch; 0 = batch / dp)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--steps", t.steps, "Total optimizer steps (the run ends at this step)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  cmd->add_option("--lr", t.lr, "Peak learning rate")->check(CLI::Range(0.0f, 10.0f));
  cmd->add_option("--min-lr", t.min_lr, "Learning rate at the end of the cosine")
      ->check(CLI::Range(0.0f, 10.0f));
  cmd->add_option("--warmup", t.warmup, "Linear warmup steps")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--weight-decay", t.adam.weight_decay, "AdamW decoupled weight decay");
  cmd->add_option("--clip", t.clip, "Max global gradient norm (0 = off)")
      ->check(CLI::Range(0.0, 1e9));
  accept_auto(cmd->add_option(
                  "--dp", o->dp,
                  "Data-parallel replicas (each a TP group of --tp ranks; the world is tp x dp "
                  "ranks): micro-batches split over them, gradients summed; auto: the planner's"),
              1024);
  accept_auto(cmd->add_option("--pp", o->pp,
                              "Pipeline stages (the world is tp x pp x dp ranks, tp fastest): "
                              "layers split over them, micro-batches run in the 1F1B order (interleaved "
                              "with --pp-virtual); auto: the planner's"),
              1024);
  cmd->add_flag("--sequence-parallel", o->sequence_parallel,
                "Sequence parallelism over the --tp ranks (Megatron-SP): norms and residual adds on each "
                "rank's share of the tokens, all-gather / reduce-scatter instead of all-reduce; less "
                "activation memory per rank, the same training (MoE layers route the gathered tokens)");
  cmd->add_option("--zero", o->zero,
                  "1: the distributed optimizer (ZeRO-1): AdamW moments sharded over the --dp ranks, "
                  "gradients reduce-scattered and parameters all-gathered; 0: replicated")
      ->check(CLI::Range(0, 1));
  cmd->add_option("--dp-bucket-mb", o->dp_bucket_mb,
                  "Data parallelism: gradients all-reduced (with --zero 1: reduce-scattered) in buckets of "
                  "this many MiB on a communication thread as soon as backward has finished them, "
                  "overlapping the rest of backward; 0: all after backward")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--pp-layers", o->pp_layers,
                  "Layers per pipeline stage, e.g. 7,6 (default: an even split, earlier stages "
                  "taking the remainder); with --pp-virtual V, pp x V counts, one per virtual stage")
      ->delimiter(',');
  cmd->add_option("--pp-virtual", o->pp_virtual,
                  "Interleaved pipeline schedule: V model chunks per stage (virtual stages; stage s holds "
                  "layer groups s, s + pp, ...), the bubble cut to 1/V for V times the stages' transfers; "
                  "each data-parallel rank's micro-batches must be a multiple of --pp")
      ->check(CLI::Range(1, 64));
  cmd->add_flag(
      "--bf16,!--no-bf16", o->bf16,
      "Mixed precision: matmuls in bf16 (f32 accumulation); master weights, grads, AdamW state, "
      "norms, attention and the loss in f32");
  cmd->add_option("--recompute-layers", t.compute.recompute_layers,
                  "Activation recomputation: the first N layers save only their input and rerun "
                  "their forward "
                  "in backward (>= --layers: every layer)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--moe-aux-loss-coef", t.compute.moe_aux_loss_coef,
                  "Mixture-of-experts models: weight of the load-balancing loss added to the cross-entropy "
                  "(default: the model config's router_aux_loss_coef; 0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--moe-z-loss-coef", t.compute.moe_z_loss_coef,
                  "Mixture-of-experts models: weight of the router z-loss (ST-MoE: mean squared logsumexp of "
                  "the router logits), added to the loss (0: none)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--moe-capacity-factor", t.compute.moe_capacity_factor,
                  "Mixture-of-experts models: each expert takes at most factor x tokens x k / experts of a "
                  "micro-batch's routed slots, first choices first, the rest dropped (0: dropless)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", t.seed, "Data seed (windows)");
  cmd->add_option("--init-seed", o->init_seed, "Weight initialisation seed");
  cmd->add_option("--eval-every", t.eval_every, "Steps between validation losses (0 = never)");
  cmd->add_option("--eval-batches", t.eval_batches, "Validation micro-batches per evaluation")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option(
      "--out", t.out_dir,
      "Checkpoint root directory (step-N/ + latest; with --resume: the resumed run's root)");
  cmd->add_option("--save-every", t.save_every, "Steps between checkpoints (0 = only at the end)");
  cmd->add_option("--keep-last", t.retention.keep_last,
                  "Keep only the newest N checkpoints of --out, removing older ones after each "
                  "save is complete (0 = keep all; the one `latest` names is never removed)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--keep-every", t.retention.keep_every,
                  "With --keep-last: also keep every checkpoint whose step is a multiple of K")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--on-divergence", o->on_divergence,
                  "A step whose loss or gradient norm is not finite, or whose loss spikes (--spike-factor), is "
                  "never applied; then: stop (with a message naming step and batch) | rollback (to the latest "
                  "checkpoint in --out, skipping the batch; logged as an incident)")
      ->check(CLI::IsMember({"stop", "rollback"}));
  cmd->add_option("--spike-factor", t.divergence.spike_factor,
                  "A loss above this many times the mean of the last 20 accepted losses diverges (0 = off)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--max-rollbacks", t.divergence.max_rollbacks,
                  "With --on-divergence rollback: stop at the incident after this many rollbacks")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 20));
  cmd->add_option("--skip-batches", t.skip_batches,
                  "Never train on these batches (numbered like steps: batch N is step N's in a run that skips "
                  "none), e.g. 1200,1201")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--metrics-port", o->metrics_port,
                  "Serve Prometheus metrics (step, loss, grad norm, tokens/s, incidents, time in collectives) at "
                  "GET /metrics on this port (0 = any free port, printed; -1 = none)")
      ->check(CLI::Range(-1, 65535));
  cmd->add_option("--metrics-host", o->metrics_host, "Address the metrics endpoint binds");
  cmd->add_option(
      "--resume", o->resume,
      "Continue the run of this checkpoint (a step-N dir or a root with latest) at any --tp, with "
      "its settings (flags given again override them) and saving into its root");
  cmd->callback([o, cmd] {
    for (const CLI::Option* opt : cmd->get_options())
      if (opt->count() > 0)
        for (const std::string& name : opt->get_lnames()) o->given.insert(name);
    if (o->given.count("no-bf16")) o->given.insert("bf16");
    o->run.train.divergence.rollback = o->on_divergence == "rollback";
    run_train(*o);
  });
}

}  // namespace tensorpar::cli

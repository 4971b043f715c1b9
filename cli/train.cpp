// `tensorpar train`: trains a model built from flags (or loaded from an HF directory / GGUF file
// to fine-tune) on a text corpus at any TP size, printing step, loss, val loss, tokens/s, ms/step
// (or one JSON object per step), with sharded checkpoints and --resume. Logic lives in src/train/.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "comm/launch.h"
#include "core/error.h"
#include "io/sharded_checkpoint.h"
#include "model/load_model.h"
#include "model/tokenizer_loader.h"
#include "parallel/mesh.h"
#include "train/hf_export.h"
#include "train/trainer.h"

namespace tensorpar::cli {
namespace {

struct TrainCliOptions {
  CommonOptions common;
  std::string model, arch = "llama", vocab_from, data, resume;
  int64_t layers = 4, hidden = 256, heads = 8, kv_heads = 0, ffn = 0;
  TrainOptions train;
  double val_fraction = 0.05;
  int64_t max_data_tokens = 0;
  uint64_t init_seed = 1;
  bool bf16 = false;
  int dp = 1;
  bool seq_given = false;  // --seq on the command line
};

ModelConfig config_from_flags(const TrainCliOptions& o, int64_t vocab) {
  ModelConfig c;
  const int64_t kv = o.kv_heads > 0 ? o.kv_heads : o.heads;
  c.vocab_size = vocab;
  c.hidden = o.hidden;
  c.n_layers = o.layers;
  c.n_heads = o.heads;
  c.head_dim = o.heads > 0 ? o.hidden / o.heads : 0;
  c.max_position = o.train.seq;
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
  }
  c.validate("--arch flags");
  return c;
}

void print_step(const StepLog& l, bool json) {
  if (json) {
    nlohmann::json j = {{"step", l.step},      {"loss", l.loss}, {"tokens_per_s", l.tokens_per_s},
                        {"ms_per_step", l.ms}, {"lr", l.lr},     {"grad_norm", l.grad_norm}};
    if (l.val_loss) j["val_loss"] = *l.val_loss;
    std::printf("%s\n", j.dump().c_str());
  } else {
    char val[32] = "";
    if (l.val_loss) std::snprintf(val, sizeof(val), " | val %.4f", double(*l.val_loss));
    std::printf("step %5lld | loss %.4f%s | lr %.2e | norm %.3f | %8.0f tok/s | %7.1f ms\n",
                (long long)l.step, double(l.loss), val, double(l.lr), l.grad_norm, l.tokens_per_s,
                l.ms);
  }
  std::fflush(stdout);
}

void run_train(TrainCliOptions& o) {
  // The model config and tokenizer: from --resume's checkpoint, --model, or the flags.
  nlohmann::json resume_state;
  if (!o.resume.empty()) resume_state = ShardedCheckpointReader(o.resume).state();
  std::string tok_path = !o.vocab_from.empty() ? o.vocab_from : o.model;
  if (tok_path.empty() && resume_state.contains("tokenizer"))
    tok_path = resume_state["tokenizer"].get<std::string>();
  TP_CHECK(!tok_path.empty(),
           "[train] no tokenizer: pass --vocab-from TOKENIZER (HF dir, GGUF or tokenizer.json) or "
           "--model");
  TP_CHECK(!o.data.empty(), "[train] --data FILE|DIR is required");
  o.train.extra_state = {{"tokenizer", tok_path}, {"data", o.data}};
  o.train.compute.matmul_dtype = o.bf16 ? DType::kBF16 : DType::kF32;

  LaunchConfig lc;
  lc.backend = backend_from_name(o.common.backend);
  lc.n_ranks = o.common.tp * o.dp;
  lc.threads_per_rank = o.common.threads_per_rank;
  launch_ranks(lc, [&](Communicator& world) {
    // Under mpirun without --tp/--dp the whole world is one TP group.
    const bool whole_world = lc.backend == Backend::kMpi && o.common.tp == 1 && o.dp == 1;
    const int tp_size = whole_world ? world.size() : o.common.tp;
    TP_CHECK(tp_size * o.dp == world.size(), "[train] --tp ", tp_size, " x --dp ", o.dp,
             " does not match the MPI world of ", world.size(), " ranks");
    // World rank = tp_rank + tp * dp_rank: a TP group is tp consecutive ranks.
    DeviceMesh mesh(world, {.tp = tp_size, .dp = o.dp});
    Communicator& tp = mesh.tp();
    const bool lead = world.rank() == 0;
    // Rank 0 reads and tokenises the corpus; the others receive it.
    TokenCorpus corpus;
    int64_t vocab = 0;
    if (lead) {
      const auto t0 = std::chrono::steady_clock::now();
      const Tokenizer tok = load_tokenizer(tok_path);
      vocab = tok.vocab_size();
      corpus = tokenize_corpus(list_text_files(o.data), tok, o.val_fraction, o.train.seq);
      if (o.max_data_tokens > 0 && int64_t(corpus.train.size()) > o.max_data_tokens)
        corpus.train.resize(size_t(o.max_data_tokens));
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      std::fprintf(
          stderr,
          "[train] %s: %zu train + %zu validation tokens (vocab %lld), tokenised in %.1f s\n",
          o.data.c_str(), corpus.train.size(), corpus.val.size(), (long long)vocab, s);
    }
    world.broadcast(&vocab, 1, DType::kI64, 0);
    broadcast_corpus(corpus, world);

    std::unique_ptr<CausalLM> model;
    if (!o.model.empty()) {
      LoadOptions lo;
      lo.keep_quantized = false;  // quantized GGUF weights are dequantized to f32 to train
      model = load_model(o.model, tp, lo);
    } else if (!o.resume.empty()) {
      // Every parameter comes from the checkpoint; the config (any RoPE layout) is stored in it.
      model = init_model(stored_model_config(resume_state, o.resume), tp, o.init_seed);
    } else {
      model = init_model(config_from_flags(o, vocab), tp, o.init_seed);
    }
    TP_CHECK(model->config().vocab_size >= vocab, "[train] the tokenizer has ", vocab,
             " tokens but the model's vocabulary only ", model->config().vocab_size);
    TrainOptions topt = o.train;
    // Without --seq, a loaded or resumed model with fewer positions trains at its own length.
    if (!o.seq_given) topt.seq = std::min(topt.seq, model->config().max_position);
    Trainer trainer(*model, corpus, topt, o.dp > 1 ? &mesh.dp() : nullptr);
    if (!o.resume.empty()) {
      const std::string note = trainer.resume(o.resume);
      if (lead && !note.empty()) std::fprintf(stderr, "[train] %s\n", note.c_str());
    }

    // Parameters and the bytes of params + grads + AdamW moments on each rank of a TP group.
    int64_t mine[2] = {0, 0};
    for (const ParamShard& p : model->parameters()) {
      const int64_t n = p.value->numel();
      mine[0] += p.shard_dim < 0 && tp.rank() != 0 ? 0 : n / std::max(1, p.shard_dim < 0 ? 1 : p.copies);
      mine[1] += n * 4 * (p.grad ? 4 : 1);
    }
    std::vector<int64_t> all(size_t(2 * tp.size()));
    tp.all_gather(mine, all.data(), 2, DType::kI64);
    if (lead) {
      int64_t n_params = 0;
      std::string mem;
      for (int r = 0; r < tp.size(); ++r) {
        n_params += all[size_t(2 * r)];
        char b[32];
        std::snprintf(b, sizeof(b), "%s%.1f", r ? " / " : "",
                      double(all[size_t(2 * r + 1)]) / (1 << 20));
        mem += b;
      }
      std::fprintf(stderr,
                   "[train] %s, %.2fM parameters, tp %d, dp %d; params+grads+AdamW per rank: %s "
                   "MiB; matmuls %s; recomputed layers %lld; from step %lld\n",
                   model->config().summary().c_str(), double(n_params) / 1e6, tp.size(), o.dp,
                   mem.c_str(), o.bf16 ? "bf16" : "f32",
                   (long long)std::min(o.train.compute.recompute_layers, model->config().n_layers),
                   (long long)trainer.step());
    }
    trainer.run([&](const StepLog& l) {
      if (lead) print_step(l, o.common.json);
    });
    if (lead && !o.train.out_dir.empty())
      std::fprintf(stderr, "[train] checkpoint: %s\n",
                   resolve_checkpoint_dir(o.train.out_dir).c_str());
  });
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto o = std::make_shared<TrainCliOptions>();
  CLI::App* cmd =
      app.add_subcommand("train", "Train (or fine-tune) a model with tensor parallelism");
  add_common_options(*cmd, o->common);
  cmd->add_option("--model", o->model,
                  "Fine-tune this HF directory or GGUF file (quantized weights are dequantized)");
  cmd->add_option("--arch", o->arch, "New model: llama | gpt2")
      ->check(CLI::IsMember({"llama", "gpt2"}));
  cmd->add_option("--layers", o->layers, "New model: layers")->check(CLI::Range(1, 1024));
  cmd->add_option("--hidden", o->hidden, "New model: hidden size")->check(CLI::Range(1, 1 << 16));
  cmd->add_option("--heads", o->heads, "New model: attention heads")->check(CLI::Range(1, 1024));
  cmd->add_option("--kv-heads", o->kv_heads, "New model: kv heads (llama; default = heads)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--ffn", o->ffn,
                  "New model: MLP size (default llama 8/3 C rounded to 64, gpt2 4 C)")
      ->check(CLI::Range(0, 1 << 20));
  CLI::Option* seq = cmd->add_option("--seq", o->train.seq,
                                     "Tokens per sequence (also a new model's max positions; default 128, "
                                     "at most a loaded model's positions)")
                         ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--vocab-from", o->vocab_from,
                  "Tokenizer: HF directory, GGUF file or tokenizer.json");
  cmd->add_option("--data", o->data,
                  "Text file, or a directory of text files (fortune files: *.dat skipped)");
  cmd->add_option("--val-fraction", o->val_fraction,
                  "Last fraction of the tokens held out for validation")
      ->check(CLI::Range(0.0, 0.5));
  cmd->add_option("--max-data-tokens", o->max_data_tokens,
                  "Use at most this many training tokens (0 = all)");
  cmd->add_option("--batch", o->train.batch, "Sequences per optimizer step")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--micro-batch", o->train.micro_batch,
                  "Sequences per forward/backward (divides --batch; 0 = batch)")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("--steps", o->train.steps, "Total optimizer steps")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  cmd->add_option("--lr", o->train.lr, "Peak learning rate")->check(CLI::Range(0.0f, 10.0f));
  cmd->add_option("--min-lr", o->train.min_lr, "Learning rate at the end of the cosine")
      ->check(CLI::Range(0.0f, 10.0f));
  cmd->add_option("--warmup", o->train.warmup, "Linear warmup steps")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 40));
  cmd->add_option("--weight-decay", o->train.adam.weight_decay, "AdamW decoupled weight decay");
  cmd->add_option("--clip", o->train.clip, "Max global gradient norm (0 = off)")
      ->check(CLI::Range(0.0, 1e9));
  cmd->add_option("--dp", o->dp,
                  "Data-parallel replicas (each a TP group of --tp ranks; the world is tp x dp "
                  "ranks): micro-batches split over them, gradients summed")
      ->check(CLI::Range(1, 1024));
  cmd->add_flag("--bf16", o->bf16,
               "Mixed precision: matmuls in bf16 (f32 accumulation); master weights, grads, "
               "AdamW state, norms, attention and the loss in f32");
  cmd->add_option("--recompute-layers", o->train.compute.recompute_layers,
                  "Activation recomputation: the first N layers save only their input and rerun "
                  "their forward in backward (>= --layers: every layer)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->train.seed, "Data seed (windows)");
  cmd->add_option("--init-seed", o->init_seed, "Weight initialisation seed");
  cmd->add_option("--eval-every", o->train.eval_every,
                  "Steps between validation losses (0 = never)");
  cmd->add_option("--eval-batches", o->train.eval_batches,
                  "Validation micro-batches per evaluation")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--out", o->train.out_dir, "Checkpoint root directory (step-N/ + latest)");
  cmd->add_option("--save-every", o->train.save_every,
                  "Steps between checkpoints (0 = only at the end)");
  cmd->add_option("--resume", o->resume,
                  "Resume from this checkpoint (a step-N dir or a root with latest), any --tp");
  cmd->callback([o, seq] {
    o->seq_given = seq->count() > 0;
    run_train(*o);
  });
}

}  // namespace tensorpar::cli

#include "cli/run_model.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "cli/auto_plan.h"
#include "cli/launch_checks.h"
#include "comm/timed_communicator.h"
#include "core/error.h"
#include "io/gguf.h"
#include "model/load_model.h"
#include "model/tokenizer_loader.h"
#include "model/transformer.h"
#include "parallel/mesh.h"

namespace tensorpar::cli {
namespace {
namespace fs = std::filesystem;

bool is_gguf_path(const std::string& p) {
  return fs::path(p).extension() == ".gguf";
}

bool is_checkpoint_dir(const fs::path& p) {
  return fs::exists(p / "latest") ||
         (fs::exists(p / "index.json") && !fs::exists(p / "config.json"));
}

}  // namespace

void check_tp_size(int tp, const ModelConfig& config, const char* command) {
  // Heads are the coarsest thing split: past them a rank would hold no attention at all.
  TP_CHECK(tp <= config.n_heads, "[", command, "] --tp ", tp, " exceeds the model's ",
           config.n_heads, " attention heads (every rank needs at least one): pass --tp ",
           config.n_heads, " or less");
}

void add_model_options(CLI::App& cmd, ModelOptions& opts) {
  cmd.add_option("-m,--model", opts.model, "GGUF file or Hugging Face directory")->required();
  cmd.add_option("--dtype", opts.dtype,
                 "Float weights in memory: auto (16-bit weights keep their type, bf16 or f16; f32 stays f32) | "
                 "f32 | bf16 (quantized stay quantized)")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  cmd.add_option("--ctx", opts.ctx,
                 "Context length in tokens (0 = the model's positions, at most 4096; never more "
                 "than the model's)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 24));
  cmd.add_option("--tokenizer", opts.tokenizer,
                 "Tokenizer and chat template from this HF directory, tokenizer.json or GGUF file "
                 "(empty = --model's)");
  cmd.add_option("--activations", opts.activations,
                 "Block-quantized (GGUF) weights multiply: int8 (activations rounded to 8 bits per "
                 "block, integer dot products on AVX2 or AVX512-VNNI CPUs, as llama.cpp) | f32 (f32 "
                 "activations: slower, slightly more accurate). Other CPUs always use f32")
      ->check(CLI::IsMember({"int8", "f32"}));
  cmd.add_option("--kv-dtype", opts.kv_dtype,
                 "Keys and values in the KV cache: f32 | f16 (half the memory, so twice the "
                 "tokens; the query rounded to f16 for the scores, as llama.cpp's default cache)")
      ->check(CLI::IsMember({"f32", "f16"}));
  cmd.add_flag("--tp-invariant", opts.tp_invariant,
               "Logits bitwise the same at every --tp: the row-parallel layers (attention output, MLP "
               "down) hold whole rows and gather their input instead of summing partial products "
               "(one all-gather more per layer)");
  cmd.add_option("--pp", opts.pp,
                 "Pipeline stages: the layers split over this many groups of tp ranks (world tp x pp), "
                 "each rank holding its stage's weights and KV cache")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--pp-layers", opts.pp_layers, "Layers per pipeline stage, comma-separated (default: even)")
      ->delimiter(',');
  cmd.add_option("--pp-micro-rows", opts.pp_micro_rows,
                 "With --pp: a forward of N rows runs through the stages as min(4 x pp, N / this) "
                 "micro-batches so that the stages overlap (0: never cut)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));
}

void check_model_paths(const ModelOptions& opts, const char* command, bool needs_tokenizer) {
  const fs::path m(opts.model);
  TP_CHECK(fs::exists(m), "[", command, "] --model ", opts.model, ": no such file or directory");
  if (fs::is_directory(m)) {
    TP_CHECK(
        !is_checkpoint_dir(m), "[", command, "] ", opts.model,
        " is a training checkpoint, not a model: export it first (tensorpar export --checkpoint ",
        opts.model, " --out DIR) and pass --model DIR");
    TP_CHECK(
        fs::exists(m / "config.json"), "[", command, "] ", opts.model,
        " has no config.json: --model takes a GGUF file or a Hugging Face directory (config.json + "
        "*.safetensors)");
  }
  if (!opts.tokenizer.empty())
    TP_CHECK(fs::exists(opts.tokenizer), "[", command, "] --tokenizer ", opts.tokenizer,
             ": no such file or directory");
  if (needs_tokenizer && opts.tokenizer.empty() && fs::is_directory(m))
    TP_CHECK(fs::exists(m / "tokenizer.json"), "[", command, "] ", opts.model,
             " has no tokenizer.json (an export of a run started from a GGUF file has none): pass "
             "--tokenizer "
             "with the GGUF file, HF directory or tokenizer.json the model was trained with");
}

void run_with_model(const char* command, const CommonOptions& given, const ModelOptions& mopts,
                    const std::function<void(CausalLM& model)>& fn) {
  check_launch(given, command);
  const ModelConfig config = read_model_config(mopts.model);  // headers only
  CommonOptions common = given;
  const int pp = mopts.pp;
  TP_CHECK(pp == 1 || given.tp != kAutoSize, "[", command, "] --tp auto with --pp ", pp,
           ": give --tp (the planner sizes one pipeline stage only in training)");
  TP_CHECK(pp == 1 || common.ep <= 1, "[", command, "] --ep with --pp: expert parallelism runs without "
           "pipeline stages");
  split_layers(config.n_layers, pp, mopts.pp_layers);  // names a bad split before any rank starts
  common.tp = resolve_inference_tp(given, config, mopts.model, mopts.dtype, command);
  LaunchConfig lc;
  lc.backend = backend_from_name(common.backend);
  lc.n_ranks = common.tp * pp;
  lc.threads_per_rank = common.threads_per_rank;
  launch_ranks(lc, [&](Communicator& world) {
    // Under a launcher without --tp the world is the model: world / pp TP ranks per stage.
    TP_CHECK(!is_mpi_job(lc.backend) || common.tp == 1 || common.tp * pp == world.size(), "[", command, "] --tp ",
             common.tp, " x --pp ", pp, " does not match the MPI world of ", world.size(), " ranks (start mpirun -np ",
             common.tp * pp, ", or leave --tp out to use the whole world)");
    TP_CHECK(world.size() % pp == 0, "[", command, "] --pp ", pp, " does not divide the world of ", world.size(),
             " ranks");
    check_tp_size(world.size() / pp, config, command);
    LoadOptions lo;
    lo.float_weights = mopts.dtype == "auto" ? std::nullopt : std::optional(dtype_from_name(mopts.dtype));
    lo.tp_invariant = mopts.tp_invariant;
    // Every collective of the model goes through a timer (a server reports time in collectives).
    TimedCommunicator timed(world);
    std::optional<DeviceMesh> mesh;
    std::unique_ptr<CausalLM> model;
    if (pp > 1) {
      mesh.emplace(timed, MeshSizes{.tp = world.size() / pp, .pp = pp});
      model = load_pipeline_stage(mopts.model, mesh->tp(), mesh->pp(), timed, lo, mopts.pp_layers,
                                  mopts.pp_micro_rows);
    } else {
      model = load_model(mopts.model, timed, lo, ExpertParallel{common.ep, nullptr});
    }
    model->set_int8_activations(mopts.activations == "int8");
    model->set_kv_dtype(dtype_from_name(mopts.kv_dtype));
    fn(*model);
  });
}

int64_t context_length(const ModelOptions& mopts, const CausalLM& model) {
  const int64_t m = model.config().max_position;
  if (mopts.ctx > 0) {
    // Past its trained positions a model's output is noise (learned position tables end there).
    TP_CHECK(m <= 0 || mopts.ctx <= m, "[context] --ctx ", mopts.ctx, " exceeds the ", m,
             " positions the model was trained for: pass --ctx ", m, " or less");
    return mopts.ctx;
  }
  return std::clamp<int64_t>(m > 0 ? m : 2048, 16, 4096);
}

ChatTemplate chat_template_or_chatml(const ModelOptions& opts, const Tokenizer& tok,
                                     const char* command) {
  const std::string& src = tokenizer_source(opts);
  const bool has_template =
      !tok.chat_template().empty() ||
      (is_gguf_path(src) && GgufFile::open(src)->metadata().has("tokenizer.chat_template"));
  if (!has_template)
    std::fprintf(stderr,
                 "[%s] %s has no chat template: turns are formatted as ChatML "
                 "(<|im_start|>role\\n...<|im_end|>)\n",
                 command, src.c_str());
  return load_chat_template(src, tok);
}

std::vector<double> weights_kv_mb_per_rank(CausalLM& model, const KvCache& cache) {
  Communicator& tp = model.control();
  const int64_t mine = model.weight_bytes() + cache.bytes();
  std::vector<int64_t> all(size_t(tp.size()));
  tp.all_gather(&mine, all.data(), 1, DType::kI64);
  std::vector<double> mb;
  for (int64_t b : all) mb.push_back(double(b) / (1 << 20));
  return mb;
}

double process_peak_rss_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024;  // KiB on Linux
}

}  // namespace tensorpar::cli

// `tensorpar export`: a sharded training checkpoint -> a plain HF directory (config.json +
// model.safetensors + the run's tokenizer, a GGUF's written as tokenizer.json) that
// `tensorpar generate` and transformers load; a GGUF llama run's included (hf_export.h).
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "core/error.h"
#include "io/sharded_checkpoint.h"
#include "train/checkpoint.h"
#include "train/hf_export.h"

namespace tensorpar::cli {
namespace {
namespace fs = std::filesystem;

struct ExportOptions {
  std::string checkpoint, out;
  std::string dtype = "f32";
};

void run_export(const ExportOptions& o) {
  TP_CHECK(fs::exists(o.checkpoint), "[export] --checkpoint ", o.checkpoint, ": no such directory");
  const int64_t n = export_hf(o.checkpoint, o.out, dtype_from_name(o.dtype));
  const ShardedCheckpointReader r(o.checkpoint);
  const nlohmann::json& state = check_checkpoint_state(r.state(), r.dir() + "/index.json");
  std::string note = "";
  if (stored_model_config(state, r.dir()).rope.layout == RopeLayout::kInterleaved)
    note = " (q/k rows put back from GGUF llama order into HF's)";
  const std::string tok = export_tokenizer(state.value("tokenizer", std::string()), o.out);
  if (!tok.empty()) note += "; " + tok;
  std::printf("exported %lld %s tensors of %s (step %lld) to %s%s\n", (long long)n, o.dtype.c_str(),
              r.dir().c_str(), (long long)state.value("step", int64_t(0)), o.out.c_str(),
              note.c_str());
}

}  // namespace

void add_export_command(CLI::App& app) {
  auto o = std::make_shared<ExportOptions>();
  CLI::App* cmd =
      app.add_subcommand("export", "Write a training checkpoint as a plain Hugging Face directory");
  cmd->add_option("--checkpoint", o->checkpoint,
                  "Checkpoint (a step-N directory or a root with latest)")
      ->required();
  cmd->add_option("--out", o->out, "Output HF directory")->required();
  cmd->add_option("--dtype", o->dtype,
                  "Weights' dtype in model.safetensors (f32: the training master weights as "
                  "they are; bf16 / f16: half the bytes, each value rounded once)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}))
      ->capture_default_str();
  cmd->callback([o] { run_export(*o); });
}

}  // namespace tensorpar::cli

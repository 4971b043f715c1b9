#include "cli/run_model.h"

#include <algorithm>

#include "comm/timed_communicator.h"
#include "core/error.h"
#include "model/load_model.h"

namespace tensorpar::cli {

void add_model_options(CLI::App& cmd, ModelOptions& opts) {
  cmd.add_option("--model", opts.model, "GGUF file or Hugging Face directory")->required();
  cmd.add_option("--dtype", opts.dtype, "Float weights in memory: f32 | bf16 (quantized stay quantized)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  cmd.add_option("--ctx", opts.ctx, "Context length in tokens (default: the model's, at most 4096)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 24));
  cmd.add_option("--tokenizer", opts.tokenizer,
                 "Tokenizer and chat template from this HF directory, tokenizer.json or GGUF file "
                 "(default: --model's)");
}

void run_with_model(const CommonOptions& common, const ModelOptions& mopts,
                    const std::function<void(CausalLM& model)>& fn) {
  LaunchConfig lc;
  lc.backend = backend_from_name(common.backend);
  lc.n_ranks = common.tp;
  lc.threads_per_rank = common.threads_per_rank;
  launch_ranks(lc, [&](Communicator& world) {
    TP_CHECK(lc.backend != Backend::kMpi || common.tp == 1 || common.tp == world.size(), "[tensorpar] --tp ",
             common.tp, " does not match the MPI world of ", world.size(), " ranks");
    LoadOptions lo;
    lo.float_weights = dtype_from_name(mopts.dtype);
    // Every collective of the model goes through a timer (a server reports time in collectives).
    TimedCommunicator timed(world);
    auto model = load_model(mopts.model, timed, lo);
    fn(*model);
  });
}

int64_t context_length(const ModelOptions& mopts, const CausalLM& model) {
  if (mopts.ctx > 0) return mopts.ctx;
  const int64_t m = model.config().max_position;
  return std::clamp<int64_t>(m > 0 ? m : 2048, 16, 4096);
}

std::vector<double> memory_per_rank_mb(CausalLM& model, const KvCache& cache) {
  Communicator& tp = model.tp();
  const int64_t mine = model.weight_bytes() + cache.bytes();
  std::vector<int64_t> all(size_t(tp.size()));
  tp.all_gather(&mine, all.data(), 1, DType::kI64);
  std::vector<double> mb;
  for (int64_t b : all) mb.push_back(double(b) / (1 << 20));
  return mb;
}

}  // namespace tensorpar::cli

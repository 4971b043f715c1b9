// `tensorpar bench decode` (see decode_batch_bench.h). Each sequence first runs a prompt of
// --context tokens (its own tokens, so no two sequences share a key); then --steps decode steps of
// R rows are timed, three times, and the median taken. The tokens are fixed ids (no sampling:
// only the forward is measured).
#include "decode_batch_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "comm/launch.h"
#include "core/dtype.h"
#include "core/error.h"
#include "model/load_model.h"

namespace tensorpar {

namespace {

struct DecodeBenchOptions {
  std::string model, dtype = "auto";
  std::vector<int64_t> rows = {1, 4, 16, 64};
  int64_t context = 64, steps = 16;
  int tp = 1, threads_per_rank = 0;
};

using Clock = std::chrono::steady_clock;

void run_decode_bench(const DecodeBenchOptions& o) {
  LaunchConfig lc;
  lc.n_ranks = o.tp;
  lc.threads_per_rank = o.threads_per_rank;
  launch_ranks(lc, [&](Communicator& world) {
    LoadOptions lo;
    lo.float_weights = o.dtype == "auto" ? std::nullopt : std::optional(dtype_from_name(o.dtype));
    auto m = load_model(o.model, world, lo);
    const int64_t V = m->config().vocab_size, Vl = m->vocab_range().size();
    const bool lead = world.rank() == 0;
    if (lead)
      std::printf("decode: %s, tp %d; %lld-token context per sequence, %lld steps x 3 (median)\n%6s %12s %12s %10s\n",
                  m->config().summary().c_str(), world.size(), (long long)o.context, (long long)o.steps, "rows",
                  "ms/step", "tokens/s", "vs 1 row");
    double one_row = 0;
    for (const int64_t R : o.rows) {
      const int64_t bs = 16, per_seq = (o.context + o.steps * 3 + bs) / bs + 1;
      auto pool = m->make_kv_pool(R * per_seq, bs);
      std::vector<std::vector<int32_t>> blocks(static_cast<size_t>(R)), prompts(static_cast<size_t>(R));
      std::vector<int32_t> next(static_cast<size_t>(R));
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t b = 0; b < per_seq; ++b) blocks[size_t(r)].push_back(int32_t(r * per_seq + b));
        for (int64_t t = 0; t < o.context; ++t) prompts[size_t(r)].push_back(int32_t((r * 131 + t * 7 + 1) % V));
        next[size_t(r)] = int32_t((r * 17 + 3) % V);
      }
      Tensor logits = Tensor::empty({R, Vl}, DType::kF32);
      std::vector<SeqChunk> chunks(static_cast<size_t>(R));
      for (int64_t r = 0; r < R; ++r)
        chunks[size_t(r)] = {prompts[size_t(r)], 0, blocks[size_t(r)], LogitRows::kLast};
      m->forward_batch(logits, chunks, *pool);
      int64_t pos = o.context;
      std::vector<double> ms;
      for (int rep = 0; rep < 3; ++rep) {
        world.barrier();
        const auto t0 = Clock::now();
        for (int64_t s = 0; s < o.steps; ++s, ++pos) {
          for (int64_t r = 0; r < R; ++r)
            chunks[size_t(r)] = {std::span<const int32_t>(&next[size_t(r)], 1), pos, blocks[size_t(r)],
                                 LogitRows::kLast};
          m->forward_batch(logits, chunks, *pool);
        }
        ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / double(o.steps));
      }
      std::sort(ms.begin(), ms.end());
      const double step_ms = ms[1], tok_s = double(R) * 1000.0 / step_ms;
      if (R == 1) one_row = tok_s;
      if (lead) {
        std::printf("%6lld %12.1f %12.1f %10s\n", (long long)R, step_ms, tok_s,
                    one_row > 0 ? (std::to_string(tok_s / one_row).substr(0, 5) + "x").c_str() : "-");
        std::fflush(stdout);
      }
    }
  });
}

}  // namespace

void add_decode_batch_bench(CLI::App& bench) {
  auto o = std::make_shared<DecodeBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("decode", "Batched decode: tokens/s of R sequences decoding together");
  cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face directory")->required();
  cmd->add_option("--dtype", o->dtype, "Float weights in memory: auto | f32 | bf16")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  cmd->add_option("--rows", o->rows, "Sequences decoding together (comma-separated; 1 first gives the ratio)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(4096)));
  cmd->add_option("--context", o->context, "Prompt tokens each sequence runs first")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--steps", o->steps, "Decode steps per timed repetition")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--tp", o->tp, "Tensor-parallel ranks (threads of this process)")->check(CLI::Range(1, 64));
  cmd->add_option("-t,--threads-per-rank", o->threads_per_rank, "Compute threads per rank (0 = cores / ranks)")
      ->check(CLI::Range(0, 1024));
  cmd->callback([o] { run_decode_bench(*o); });
}

}  // namespace tensorpar

// `tensorpar bench decode` (see decode_batch_bench.h). Each row count R gets its own sequences,
// which first run a prompt of --context tokens (their own tokens, so no two sequences share a
// key); then --repeats rounds each time --steps decode steps of every R in turn, so the row counts
// meet the same moments of a shared machine (its memory bandwidth moves with other tenants). Per
// R: the median step over the rounds, and its tokens/s against one row as the median of each
// round's own ratio. The tokens are fixed ids (no sampling: only the forward is measured).
// Without --model, a Llama of random f32 weights shaped by --layers ... --vocab (what `plan
// --calibrate` times: a decode step's cost besides its weight stream).
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
#include "median.h"

namespace tensorpar {

namespace {

struct DecodeBenchOptions {
  std::string model, dtype = "auto";
  std::vector<int64_t> rows = {1, 4, 16, 64};
  int64_t context = 64, steps = 16;
  int repeats = 5, tp = 1, threads_per_rank = 0;
  bool json = false;
  // A random Llama when there is no --model.
  int64_t layers = 4, hidden = 256, heads = 4, kv_heads = 0, ffn = 0, vocab = 1024;
};

ModelConfig random_llama_config(const DecodeBenchOptions& o) {
  ModelConfig c;
  c.model_type = "llama";
  c.vocab_size = o.vocab;
  c.hidden = o.hidden;
  c.n_layers = o.layers;
  c.n_heads = o.heads;
  c.n_kv_heads = o.kv_heads > 0 ? o.kv_heads : o.heads;
  c.head_dim = o.hidden / o.heads;
  c.ffn = o.ffn > 0 ? o.ffn : (8 * o.hidden / 3 + 63) / 64 * 64;
  c.max_position = o.context + o.steps * o.repeats + 16;
  c.norm_eps = 1e-5;
  c.tie_embeddings = true;
  c.validate("bench decode (random Llama)");
  return c;
}

using Clock = std::chrono::steady_clock;

// R sequences after their prompts, and where the next decode step writes.
struct RowBatch {
  int64_t R = 0, pos = 0;
  std::unique_ptr<KvPool> pool;
  std::vector<std::vector<int32_t>> blocks;
  std::vector<int32_t> next;
  Tensor logits;
  std::vector<SeqChunk> chunks;
};

void run_decode_bench(const DecodeBenchOptions& o) {
  LaunchConfig lc;
  lc.n_ranks = o.tp;
  lc.threads_per_rank = o.threads_per_rank;
  launch_ranks(lc, [&](Communicator& world) {
    LoadOptions lo;
    lo.float_weights = o.dtype == "auto" ? std::nullopt : std::optional(dtype_from_name(o.dtype));
    auto m = o.model.empty() ? init_model(random_llama_config(o), world, 1) : load_model(o.model, world, lo);
    m->set_int8_activations(true);  // as the inference commands do: the weights as the int8 kernel reads them
    const int64_t V = m->config().vocab_size, Vl = m->vocab_range().size();
    const bool lead = world.rank() == 0;
    std::vector<RowBatch> batches(o.rows.size());
    for (size_t i = 0; i < o.rows.size(); ++i) {
      RowBatch& b = batches[i];
      const int64_t R = o.rows[i], bs = 16, per_seq = (o.context + o.steps * o.repeats + bs) / bs + 1;
      b.R = R, b.pos = o.context;
      b.pool = m->make_kv_pool(R * per_seq, bs);
      b.blocks.resize(size_t(R));
      b.next.resize(size_t(R));
      std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(R));
      for (int64_t r = 0; r < R; ++r) {
        for (int64_t k = 0; k < per_seq; ++k) b.blocks[size_t(r)].push_back(int32_t(r * per_seq + k));
        for (int64_t t = 0; t < o.context; ++t) prompts[size_t(r)].push_back(int32_t((r * 131 + t * 7 + 1) % V));
        b.next[size_t(r)] = int32_t((r * 17 + 3) % V);
      }
      b.logits = Tensor::empty({R, Vl}, DType::kF32);
      b.chunks.resize(size_t(R));
      for (int64_t r = 0; r < R; ++r)
        b.chunks[size_t(r)] = {prompts[size_t(r)], 0, b.blocks[size_t(r)], LogitRows::kLast};
      m->forward_batch(b.logits, b.chunks, *b.pool);
    }
    // ms[i][round]: one decode step of row count i in that round.
    std::vector<std::vector<double>> ms(o.rows.size());
    for (int round = 0; round < o.repeats; ++round)
      for (size_t i = 0; i < batches.size(); ++i) {
        RowBatch& b = batches[i];
        world.barrier();
        const auto t0 = Clock::now();
        for (int64_t s = 0; s < o.steps; ++s, ++b.pos) {
          for (int64_t r = 0; r < b.R; ++r)
            b.chunks[size_t(r)] = {std::span<const int32_t>(&b.next[size_t(r)], 1), b.pos, b.blocks[size_t(r)],
                                   LogitRows::kLast};
          m->forward_batch(b.logits, b.chunks, *b.pool);
        }
        ms[i].push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count() / double(o.steps));
      }
    if (!lead) return;
    const auto one = std::find(o.rows.begin(), o.rows.end(), int64_t(1));
    // One row count's tokens/s over one row's: the median of each round's own ratio.
    auto ratios = [&](size_t i) {
      std::vector<double> r;
      if (one == o.rows.end()) return r;
      const auto& base = ms[size_t(one - o.rows.begin())];
      for (size_t k = 0; k < ms[i].size(); ++k) r.push_back(double(batches[i].R) * base[k] / ms[i][k]);
      return r;
    };
    const ModelConfig& c = m->config();
    if (o.json) {
      // The context a timed step attends over, on average: the prompt and half the steps.
      const double mean_context = double(o.context) + double(o.steps * o.repeats) / 2;
      for (size_t i = 0; i < batches.size(); ++i) {
        const std::vector<double> r = ratios(i);
        std::printf("{\"bench\":\"decode\",\"rows\":%lld,\"tp\":%d,\"layers\":%lld,\"hidden\":%lld,"
                    "\"heads\":%lld,\"kv_heads\":%lld,\"head_dim\":%lld,\"mean_context\":%.1f,"
                    "\"weight_bytes_per_rank\":%lld,\"ms_per_step\":%.4f,\"tokens_per_s\":%.2f,"
                    "\"vs_one_row\":%.4f}\n",
                    (long long)batches[i].R, world.size(), (long long)c.n_layers, (long long)c.hidden,
                    (long long)c.n_heads, (long long)c.n_kv_heads, (long long)c.head_dim, mean_context,
                    (long long)m->weight_bytes(), median(ms[i]), double(batches[i].R) * 1000.0 / median(ms[i]),
                    r.empty() ? 0.0 : median(r));
      }
      std::fflush(stdout);
      return;
    }
    std::printf("decode: %s, tp %d; %lld-token context per sequence; %d rounds of %lld steps per row count, "
                "interleaved (medians)\n%6s %12s %12s %10s %s\n",
                c.summary().c_str(), world.size(), (long long)o.context, o.repeats, (long long)o.steps,
                "rows", "ms/step", "tokens/s", "vs 1 row", "(per round)");
    for (size_t i = 0; i < batches.size(); ++i) {
      const double step_ms = median(ms[i]), tok_s = double(batches[i].R) * 1000.0 / step_ms;
      const std::vector<double> r = ratios(i);
      std::string ratio = "-", rounds;
      if (!r.empty()) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.3fx", median(r));
        ratio = buf;
        for (double x : r) {
          std::snprintf(buf, sizeof buf, "%s%.2f", rounds.empty() ? "" : " ", x);
          rounds += buf;
        }
      }
      std::printf("%6lld %12.1f %12.1f %10s (%s)\n", (long long)batches[i].R, step_ms, tok_s, ratio.c_str(),
                  rounds.c_str());
    }
    std::fflush(stdout);
  });
}

}  // namespace

void add_decode_batch_bench(CLI::App& bench) {
  auto o = std::make_shared<DecodeBenchOptions>();
  CLI::App* cmd = bench.add_subcommand("decode", "Batched decode: tokens/s of R sequences decoding together");
  CLI::Option* model = cmd->add_option("-m,--model", o->model, "GGUF file or Hugging Face directory");
  // Without --model: a Llama of random f32 weights of this shape.
  struct ShapeFlag {
    const char* flag;
    int64_t* value;
    const char* help;
    int64_t min;
  };
  const ShapeFlag shape[] = {
      {"--layers", &o->layers, "No --model: a random Llama's layers", 1},
      {"--hidden", &o->hidden, "No --model: its hidden size", 1},
      {"--heads", &o->heads, "No --model: its attention heads (head size hidden / heads)", 1},
      {"--kv-heads", &o->kv_heads, "No --model: its kv heads (0 = heads)", 0},
      {"--ffn", &o->ffn, "No --model: its MLP size (0 = 8/3 hidden rounded to 64)", 0},
      {"--vocab", &o->vocab, "No --model: its vocabulary", 1}};
  for (const ShapeFlag& f : shape)
    cmd->add_option(f.flag, *f.value, f.help)->check(CLI::Range(f.min, int64_t(1) << 20))->excludes(model);
  cmd->add_flag("--json", o->json, "One JSON object per row count (ms_per_step, tokens_per_s, mean_context, ...)");
  cmd->add_option("--dtype", o->dtype, "Float weights in memory: auto | f32 | bf16")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  cmd->add_option("--rows", o->rows, "Sequences decoding together (comma-separated; 1 first gives the ratio)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(4096)));
  cmd->add_option("--context", o->context, "Prompt tokens each sequence runs first")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--steps", o->steps, "Decode steps per row count and round")->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--repeats", o->repeats, "Rounds, each timing every row count in turn")->check(CLI::Range(1, 1000));
  cmd->add_option("--tp", o->tp, "Tensor-parallel ranks (threads of this process)")->check(CLI::Range(1, 64));
  cmd->add_option("-t,--threads-per-rank", o->threads_per_rank, "Compute threads per rank (0 = cores / ranks)")
      ->check(CLI::Range(0, 1024));
  cmd->callback([o] { run_decode_bench(*o); });
}

}  // namespace tensorpar

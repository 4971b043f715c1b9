// `tensorpar bench attention`: the training attention kernels' rates by sequence length, each row
// beside one-row-at-a-time reference kernels (--naive) on the same problem.
#include "attention_bench.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/threading.h"
#include "kernels/cpu/attention.h"
#include "measure.h"

namespace tensorpar {

namespace {

struct AttentionBenchOptions {
  bool json = false;
  bool naive = false;
  int threads = 0;
  int64_t head_size = 64;
  int64_t tokens = 2048;  // per problem: B = tokens / T sequences (at least 1)
  std::vector<int64_t> seqs{128, 256, 512, 1024, 2048};
};

struct Problem {
  AttentionDims d;
  std::vector<float> q, k, v, d_out, out, lse, d_q, d_k, d_v;
  explicit Problem(const AttentionDims& dims) : d(dims) {
    const int64_t nq = d.B * d.T * d.NH * d.HS, nkv = d.B * d.T * d.NKV * d.HS;
    q = random_values(nq, 1), k = random_values(nkv, 2), v = random_values(nkv, 3);
    d_out = random_values(nq, 4);
    out.resize(size_t(nq)), lse.resize(size_t(d.B * d.NH * d.T));
    d_q.resize(size_t(nq)), d_k.resize(size_t(nkv)), d_v.resize(size_t(nkv));
  }
};

void run_attention_bench(const AttentionBenchOptions& o) {
  apply_rank_threads(plan_rank_threads(0, 1, o.threads));
  if (!o.json)
    std::printf("causal GQA attention, %d threads, head size %ld, 8 query / 2 kv heads; GFLOP/s "
                "counting the full T x T square (forward 4 B T^2 NH HS, backward twice)\n%6s %3s "
                "%10s %10s %10s%s\n",
                current_num_threads(), long(o.head_size), "T", "B", "forward", "backward", "train",
                o.naive ? "  reference (train)" : "");
  for (int64_t T : o.seqs) {
    AttentionDims d;
    d.B = std::max<int64_t>(1, o.tokens / T);  // about as many tokens per row
    d.T = T, d.T_kv = T, d.NH = 8, d.NKV = 2, d.HS = o.head_size;
    Problem p(d);
    auto forward = [&p] {
      attention_forward(p.out.data(), p.lse.data(), p.q.data(), p.k.data(), p.v.data(), p.d);
    };
    auto backward = [&p] {
      attention_backward(p.d_q.data(), p.d_k.data(), p.d_v.data(), p.d_out.data(), p.q.data(),
                         p.k.data(), p.v.data(), p.out.data(), p.lse.data(), p.d);
    };
    const double flops = 4.0 * double(d.B * T * T * d.NH * d.HS);
    const double fwd_s = seconds_per_call(forward), bwd_s = seconds_per_call(backward);
    const double train = 3 * flops / (fwd_s + bwd_s) * 1e-9;
    double naive = 0;
    if (o.naive) {
      auto reference = [&p] {
        attention_forward_naive(p.out.data(), p.lse.data(), p.q.data(), p.k.data(), p.v.data(),
                                p.d);
        attention_backward_naive(p.d_q.data(), p.d_k.data(), p.d_v.data(), p.d_out.data(),
                                 p.q.data(), p.k.data(), p.v.data(), p.out.data(), p.lse.data(),
                                 p.d);
      };
      naive = 3 * flops / seconds_per_call(reference) * 1e-9;
    }
    if (o.json) {
      std::printf("{\"bench\": \"attention\", \"threads\": %d, \"seq\": %ld, \"batch\": %ld, "
                  "\"heads\": %ld, \"kv_heads\": %ld, \"head_size\": %ld, "
                  "\"forward_gflops\": %.3f, \"backward_gflops\": %.3f, \"train_gflops\": %.3f",
                  current_num_threads(), long(T), long(d.B), long(d.NH), long(d.NKV), long(d.HS),
                  flops / fwd_s * 1e-9, 2 * flops / bwd_s * 1e-9, train);
      if (o.naive) std::printf(", \"reference_train_gflops\": %.3f", naive);
      std::printf("}\n");
    } else {
      std::printf("%6ld %3ld %10.1f %10.1f %10.1f", long(T), long(d.B), flops / fwd_s * 1e-9,
                  2 * flops / bwd_s * 1e-9, train);
      if (o.naive) std::printf("  %10.1f (%.1fx)", naive, train / naive);
      std::printf("\n");
    }
    std::fflush(stdout);
  }
}

}  // namespace

void add_attention_bench(CLI::App& bench) {
  auto opt = std::make_shared<AttentionBenchOptions>();
  CLI::App* cmd = bench.add_subcommand(
      "attention",
      "Training attention kernels' GFLOP/s by sequence length (what plan --calibrate fits)");
  cmd->add_flag("--json", opt->json, "One JSON object per line");
  cmd->add_flag("--naive", opt->naive, "Also time the one-row-at-a-time reference kernels (slow)");
  cmd->add_option("--threads", opt->threads, "Compute threads (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->add_option("--head-size", opt->head_size, "Head size")->check(CLI::Range(1, 1024));
  cmd->add_option("--tokens", opt->tokens, "Tokens per problem: tokens / T sequences (at least 1)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20));
  cmd->add_option("--seq", opt->seqs, "Sequence lengths (default 128,256,512,1024,2048)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t(1), int64_t(1) << 16));
  cmd->callback([opt] { run_attention_bench(*opt); });
}

}  // namespace tensorpar

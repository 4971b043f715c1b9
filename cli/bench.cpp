// `tensorpar bench <name>`: the benchmarks of bench/, each a sub-subcommand.
#include "attention_bench.h"
#include "cli/commands.h"
#include "comm_bench.h"
#include "decode_batch_bench.h"
#include "gemm_bench.h"

namespace tensorpar::cli {

void add_bench_command(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "Benchmarks (our figure beside the peer or the limit)");
  bench->require_subcommand(1);
  // Benchmarks register here, one line each.
  add_comm_bench(*bench);
  add_gemm_bench(*bench);
  add_decode_batch_bench(*bench);
  add_attention_bench(*bench);
}

}  // namespace tensorpar::cli

// tensorpar: the command line. Every subcommand registers itself here (cli/commands.h).
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/error.h"

namespace tensorpar::cli {

void add_common_options(CLI::App& cmd, CommonOptions& opts) {
  cmd.add_option("--backend", opts.backend, "Communication backend: threads | mpi")
      ->check(CLI::IsMember({"threads", "mpi"}));
  cmd.add_option("--tp", opts.tp, "Tensor-parallel size (threads backend: ranks in this process)")
      ->check(CLI::Range(1, 64));
  cmd.add_option("--threads-per-rank", opts.threads_per_rank,
                 "Compute threads per rank (default: cores / ranks)")
      ->check(CLI::Range(0, 1024));
  cmd.add_flag("--json", opts.json, "Machine-readable output: one JSON object per line");
}

}  // namespace tensorpar::cli

int main(int argc, char** argv) {
  CLI::App app{"tensorpar: tensor-parallel transformer engine"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tensorpar 0.1.0");
  tensorpar::cli::add_bench_command(app);
  tensorpar::cli::add_inspect_command(app);
  tensorpar::cli::add_generate_command(app);
  tensorpar::cli::add_chat_command(app);
  tensorpar::cli::add_perplexity_command(app);
  tensorpar::cli::add_train_command(app);
  tensorpar::cli::add_export_command(app);
  tensorpar::cli::add_serve_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const tensorpar::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}

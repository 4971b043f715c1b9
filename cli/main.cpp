// tensorpar: the command line. Every subcommand registers itself here (cli/commands.h).
#include <cstdio>
#include <exception>

#include "cli/auto_plan.h"
#include "cli/commands.h"
#include "cli/error_text.h"
#include "core/error.h"

namespace tensorpar::cli {

void add_common_options(CLI::App& cmd, CommonOptions& opts) {
  cmd.add_option("--backend", opts.backend,
                 "Communication backend: threads | mpi | hybrid (mpi with two-level collectives: shared memory "
                 "inside a host, the network between hosts; docs/multihost.md)")
      ->check(CLI::IsMember({"threads", "mpi", "hybrid"}));
  accept_auto(cmd.add_option("--tp", opts.tp,
                              "Tensor-parallel size (threads backend: ranks in this process); auto: "
                              "the planner's choice for this machine (docs/planner.md)"),
              64);
  cmd.add_option("--cluster", opts.cluster,
                 "What --tp auto plans for: a cluster file (tensorpar plan --calibrate) or preset");
  cmd.add_option("--ep", opts.ep,
                 "Expert-parallel size (mixture-of-experts models): the experts spread over this many groups of "
                 "the tp ranks (must divide --tp; each expert's ffn split over tp / ep ranks)")
      ->check(CLI::Range(1, 64));
  cmd.add_option("-t,--threads-per-rank", opts.threads_per_rank,
                 "Compute threads per rank (0 = cores / ranks)")
      ->check(CLI::Range(0, 1024));
  cmd.add_flag("--json", opts.json,
               "JSON instead of text, one object per line (generate: one; chat: one per turn; train: one per step)");
}

}  // namespace tensorpar::cli

int main(int argc, char** argv) {
  CLI::App app{"tensorpar: tensor-parallel transformer engine"};
  app.require_subcommand(1);
  // --help shows every option's default (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  // A bad command line is one line on stderr, naming the fix.
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "error: " + tensorpar::cli::error_text(e.what()) + " (see --help)\n";
  });
  app.set_version_flag("--version", "tensorpar 0.1.0");
  tensorpar::cli::add_bench_command(app);
  tensorpar::cli::add_inspect_command(app);
  tensorpar::cli::add_generate_command(app);
  tensorpar::cli::add_chat_command(app);
  tensorpar::cli::add_perplexity_command(app);
  tensorpar::cli::add_train_command(app);
  tensorpar::cli::add_export_command(app);
  tensorpar::cli::add_serve_command(app);
  tensorpar::cli::add_plan_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {  // tensorpar::Error and the rest
    std::fprintf(stderr, "error: %s\n", tensorpar::cli::error_text(e.what()).c_str());
    return 1;
  } catch (...) {
    std::fprintf(stderr, "error: unknown exception\n");
    return 1;
  }
  return 0;
}

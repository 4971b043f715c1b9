// MPI-launcher detection from the environment each launcher sets (see launch_checks.h).
#include "cli/launch_checks.h"

#include <cstdlib>

#include "comm/communicator.h"
#include "core/error.h"

namespace tensorpar::cli {

int mpi_launcher_world_size(std::string* source) {
  // Open MPI, MPICH / Intel MPI (Hydra PMI), MVAPICH2, and Slurm's srun with PMI.
  for (const char* name :
       {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE", "PMIX_SIZE"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long n = std::strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < 1) continue;
    if (source) *source = std::string(name) + "=" + v;
    return int(n);
  }
  return 0;
}

void check_launch(const CommonOptions& common, const char* command) {
  std::string source;
  const int world = mpi_launcher_world_size(&source);
  TP_CHECK(world <= 1 || is_mpi_job(backend_from_name(common.backend)), "[", command,
           "] started by an MPI launcher as one of ", world, " processes (", source,
           ") with --backend ", common.backend,
           ": each process would run the whole job alone; add --backend mpi (or hybrid)");
}

}  // namespace tensorpar::cli

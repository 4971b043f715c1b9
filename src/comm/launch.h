// Starting ranks. Under the threads backend, n_ranks threads of this process each get their
// own Communicator of one group and their own compute threads; under mpi, this process is
// one rank of the MPI world. Layer code only ever sees the Communicator.
#pragma once

#include <functional>

#include "comm/communicator.h"

namespace tensorpar {

struct LaunchConfig {
  Backend backend = Backend::kThreads;
  int n_ranks = 1;           // threads backend: ranks in this process; mpi: ignored (the world)
  int threads_per_rank = 0;  // 0 = cores / local ranks
  CommOptions comm = CommOptions::from_env();
};

// Runs fn on every rank of this process and returns when all are done. If any rank throws,
// the group is aborted (peers' pending collectives fail) and the first error is rethrown here.
void launch_ranks(const LaunchConfig& config, const std::function<void(Communicator& world)>& fn);

}  // namespace tensorpar

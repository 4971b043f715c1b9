// Starting ranks. Under the threads backend, n_ranks threads of this process each get their
// own Communicator of one group and their own compute threads; under mpi, this process is
// one rank of the MPI world. Layer code only ever sees the Communicator.
#pragma once

#include <cstdlib>
#include <functional>
#include <string>

#include "comm/communicator.h"

namespace tensorpar {

struct LaunchConfig {
  Backend backend = Backend::kThreads;
  int n_ranks = 1;           // threads backend: ranks in this process; mpi: ignored (the world)
  int threads_per_rank = 0;  // 0 = cores / local ranks
  CommOptions comm = CommOptions::from_env();
  // A fault to inject (comm/fault_injection.h), from TENSORPAR_FAULT; "" = none. Under threads a
  // killed rank's thread leaves without a word to its peers, as a dead process would (a thread
  // cannot be killed alone), and a stalled one waits until its peers' timeout has aborted the
  // group; under mpi the process SIGKILLs itself or stalls until the job is aborted.
  std::string fault = std::getenv("TENSORPAR_FAULT") ? std::getenv("TENSORPAR_FAULT") : "";
};

// Runs fn on every rank of this process and returns when all are done. If any rank throws,
// the group is aborted (peers' pending collectives fail) and the first error is rethrown here.
// With a fault, fn's world is wrapped in a FaultInjectingCommunicator.
void launch_ranks(const LaunchConfig& config, const std::function<void(Communicator& world)>& fn);

}  // namespace tensorpar

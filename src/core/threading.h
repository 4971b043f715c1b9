// Compute threads of one rank. Several ranks may share a process (the threads backend), so
// each rank thread sets its own OpenMP team size (an OpenMP ICV is per thread) and pins itself
// and its team to its own cores: ranks never oversubscribe the machine.
#pragma once

#include <vector>

namespace tensorpar {

struct RankThreads {
  int n_threads = 1;      // compute threads this rank uses (OpenMP team size, oneDNN too)
  std::vector<int> cpus;  // cores to pin to; empty = no pinning
};

// Cores available to this process (its affinity mask), in order.
std::vector<int> available_cpus();
// The slice of the process's cores for rank `local_rank` of `n_local_ranks`, with
// `threads_per_rank` threads (0 = cores / ranks, at least 1).
RankThreads plan_rank_threads(int local_rank, int n_local_ranks, int threads_per_rank);
// Applies the plan to the calling thread: OpenMP team size and (best effort) pinning of the
// calling thread and its OpenMP workers.
void apply_rank_threads(const RankThreads& plan);
// Threads the calling thread's parallel regions will use.
int current_num_threads();

// How the calling thread waits for communication: spinning and yielding first (false, the
// default: a rank's own thread, whose waits are short and whose cores are its own), or sleeping
// between polls from the start (true: a thread that only waits on communication and shares its
// core with the rank's compute, comm/comm_thread.h). Per thread; the backends' waits read it.
void set_sleeping_comm_waits(bool on);
bool sleeping_comm_waits();

}  // namespace tensorpar

// launch_ranks: threads backend = n_ranks threads of this process, each pinned to its slice of
// the cores, sharing one world; mpi = this process is one rank of the MPI world. A rank's failure
// aborts the group and the first error is rethrown with the rank that raised it.
#include "comm/launch.h"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/threads/threads_backend.h"
#include "core/error.h"
#include "core/threading.h"

namespace tensorpar {

namespace {

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return (end != v && *end == '\0') ? int(x) : fallback;
}

void launch_threads(const LaunchConfig& config, const std::function<void(Communicator&)>& fn) {
  const int n = config.n_ranks;
  TP_CHECK(n >= 1, "[launch_ranks] n_ranks: got ", n, ", expected >= 1");
  TP_CHECK(config.threads_per_rank >= 0, "[launch_ranks] threads_per_rank: got ", config.threads_per_rank,
           ", expected >= 0 (0 = cores / ranks)");
  std::vector<std::unique_ptr<Communicator>> world = threads::create_world(n, config.comm);
  std::mutex mutex;
  std::exception_ptr first;
  int first_rank = -1;
  auto run_rank = [&](int r) {
    Communicator& comm = *world[size_t(r)];
    try {
      apply_rank_threads(plan_rank_threads(r, n, config.threads_per_rank));
      fn(comm);
    } catch (...) {
      const std::exception_ptr e = std::current_exception();
      const std::string what = what_of(e);
      {
        std::lock_guard<std::mutex> lock(mutex);
        if (!first) {
          first = e;
          first_rank = r;
        }
      }
      // After recording: the peers' "aborted" errors can never come first.
      threads::abort_world(comm, "failed: " + what);
    }
    threads::mark_exited(comm);
  };
  std::vector<std::thread> threads;
  threads.reserve(size_t(n));
  // Every rank on a new thread: pinning and the OpenMP team size stay off the caller's thread.
  for (int r = 0; r < n; ++r) threads.emplace_back(run_rank, r);
  for (auto& t : threads) t.join();
  if (first) throw Error("[launch_ranks] rank " + std::to_string(first_rank) + " of " + std::to_string(n) +
                         " failed: " + what_of(first));
}

void launch_mpi(const LaunchConfig& config, const std::function<void(Communicator&)>& fn) {
  // OpenMPI tells each process its place on the node; several ranks per node share its cores.
  const int local_size = std::max(1, env_int("OMPI_COMM_WORLD_LOCAL_SIZE", 1));
  const int local_rank = std::clamp(env_int("OMPI_COMM_WORLD_LOCAL_RANK", 0), 0, local_size - 1);
  const RankThreads plan = plan_rank_threads(local_rank, local_size, config.threads_per_rank);
  apply_rank_threads(plan);
  std::unique_ptr<Communicator> world = make_communicator(Backend::kMpi, config.comm);
  try {
    fn(*world);
  } catch (const std::exception& e) {
    throw Error("[launch_ranks] rank " + std::to_string(world->rank()) + " of " +
                std::to_string(world->size()) + " failed: " + e.what());
  }
}

}  // namespace

void launch_ranks(const LaunchConfig& config, const std::function<void(Communicator& world)>& fn) {
  switch (config.backend) {
    case Backend::kThreads: return launch_threads(config, fn);
    case Backend::kMpi: return launch_mpi(config, fn);
    case Backend::kNccl: break;
  }
  TP_CHECK(false, "[launch_ranks] backend ", backend_name(config.backend),
           " is not launched directly: start host ranks (threads or mpi) and create nccl over them");
}

}  // namespace tensorpar

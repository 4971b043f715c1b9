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

#include <csignal>
#include <cstdio>
#include <optional>

#include "comm/fault_injection.h"
#include "comm/mpi/mpi_backend.h"
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

// An injected kill of one rank under the threads backend: unwinds that rank's thread alone (it
// is not a std::exception, so no handler of the rank's own code takes it for an error to report).
struct RankDeath {
  std::string what;
};

std::optional<FaultSpec> fault_of(const LaunchConfig& config, int world_size) {
  if (config.fault.empty()) return std::nullopt;
  FaultSpec spec = parse_fault_spec(config.fault);
  TP_CHECK(spec.rank < world_size, "[TENSORPAR_FAULT] '", spec.text, "': rank ", spec.rank,
           " is not in the world of ", world_size, " ranks");
  return spec;
}

void launch_threads(const LaunchConfig& config, const std::function<void(Communicator&)>& fn) {
  const int n = config.n_ranks;
  TP_CHECK(n >= 1, "[launch_ranks] n_ranks: got ", n, ", expected >= 1");
  TP_CHECK(config.threads_per_rank >= 0, "[launch_ranks] threads_per_rank: got ", config.threads_per_rank,
           ", expected >= 0 (0 = cores / ranks)");
  const std::optional<FaultSpec> fault = fault_of(config, n);
  std::vector<std::unique_ptr<Communicator>> world = threads::create_world(n, config.comm);
  std::mutex mutex;
  std::exception_ptr first;
  int first_rank = -1;
  auto run_rank = [&](int r) {
    Communicator& comm = *world[size_t(r)];
    std::optional<FaultInjectingCommunicator> faulty;
    if (fault) {
      faulty.emplace(comm, *fault,
                     FaultHooks{[](const std::string& what) { throw RankDeath{what}; },
                                // Released once the peers gave up and left, so that their
                                // errors (naming this rank) are the ones reported first.
                                [&comm] { return threads::is_aborted(comm) && threads::others_exited(comm); }});
    }
    try {
      apply_rank_threads(plan_rank_threads(r, n, config.threads_per_rank));
      fn(faulty ? static_cast<Communicator&>(*faulty) : comm);
    } catch (const RankDeath& death) {
      // Dead: no abort with a reason. The peers find it gone (mark_exited) and say so.
      std::lock_guard<std::mutex> lock(mutex);
      if (!first) {
        first = std::make_exception_ptr(Error(death.what));
        first_rank = r;
      }
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
  CommOptions comm = config.comm;
  if (comm.spin_s < 0) comm.spin_s = plan.cpus.empty() ? 50e-6 : 2e-3;  // pinned: cores of its own
  std::unique_ptr<Communicator> world = make_communicator(config.backend, comm);
  const std::optional<FaultSpec> fault = fault_of(config, world->size());
  std::optional<FaultInjectingCommunicator> faulty;
  if (fault) {
    faulty.emplace(*world, *fault, FaultHooks{[](const std::string& what) {
                                                std::fprintf(stderr, "tensorpar: %s (SIGKILL)\n", what.c_str());
                                                std::fflush(stderr);
                                                std::raise(SIGKILL);
                                              },
                                              nullptr});
  }
  try {
    fn(faulty ? static_cast<Communicator&>(*faulty) : *world);
  } catch (const std::exception& e) {
    // Tell the peers, so that they fail naming this rank instead of timing out.
    mpi::announce_failure(e.what(), config.comm.timeout_s);
    throw Error("[launch_ranks] rank " + std::to_string(world->rank()) + " of " +
                std::to_string(world->size()) + " failed: " + e.what());
  }
}

}  // namespace

void launch_ranks(const LaunchConfig& config, const std::function<void(Communicator& world)>& fn) {
  switch (config.backend) {
    case Backend::kThreads: return launch_threads(config, fn);
    case Backend::kMpi:
    case Backend::kHybrid: return launch_mpi(config, fn);
    case Backend::kNccl: break;
  }
  TP_CHECK(false, "[launch_ranks] backend ", backend_name(config.backend),
           " is not launched directly: start host ranks (threads or mpi) and create nccl over them");
}

}  // namespace tensorpar

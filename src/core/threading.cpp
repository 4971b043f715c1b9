#include "core/threading.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>

namespace tensorpar {

std::vector<int> available_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  if (cpus.empty()) cpus.push_back(0);
  return cpus;
}

RankThreads plan_rank_threads(int local_rank, int n_local_ranks, int threads_per_rank) {
  const std::vector<int> cpus = available_cpus();
  const int n_cpus = int(cpus.size());
  RankThreads plan;
  plan.n_threads = threads_per_rank > 0 ? threads_per_rank : std::max(1, n_cpus / std::max(1, n_local_ranks));
  // Pin only when the ranks' threads fit on distinct cores; otherwise let the OS schedule.
  if (int64_t(plan.n_threads) * n_local_ranks <= n_cpus) {
    for (int i = 0; i < plan.n_threads; ++i) plan.cpus.push_back(cpus[size_t(local_rank * plan.n_threads + i)]);
  }
  return plan;
}

static void pin_self(const std::vector<int>& cpus) {
  if (cpus.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  pthread_setaffinity_np(pthread_self(), sizeof(set), &set);  // best effort: containers may refuse
}

void apply_rank_threads(const RankThreads& plan) {
  omp_set_dynamic(0);
  omp_set_num_threads(plan.n_threads);
  pin_self(plan.cpus);
  if (!plan.cpus.empty() && plan.n_threads > 1) {
    // Each worker of this rank's team pins itself to its own core of the rank's slice.
#pragma omp parallel num_threads(plan.n_threads)
    {
      const int t = omp_get_thread_num();
      pin_self({plan.cpus[size_t(t) % plan.cpus.size()]});
    }
  }
}

int current_num_threads() { return omp_get_max_threads(); }

namespace {
thread_local bool sleeping_waits = false;
}  // namespace

void set_sleeping_comm_waits(bool on) { sleeping_waits = on; }
bool sleeping_comm_waits() { return sleeping_waits; }

}  // namespace tensorpar

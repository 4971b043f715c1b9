// StealingSchedule (every unit runs exactly once whatever the team, a thread that never shows up
// has its whole share taken by the others, each owner walks its share front to back) and
// parallel_if (a region only when asked; an orphaned worksharing loop in its body covers every
// iteration on the calling thread, also when the caller is itself inside a parallel region).
#include "kernels/cpu/stealing_schedule.h"

#include <omp.h>

#include <atomic>
#include <vector>

#include "core/error.h"
#include "kernels/cpu/parallel_if.h"
#include "test_util.h"

namespace tensorpar {
namespace {

// Runs `units` units over a schedule made for `threads` threads, in a region of `team` threads;
// returns how often each unit ran.
std::vector<int> run_counts(int64_t units, int threads, int team) {
  omp_set_num_threads(threads);
  StealingSchedule s(units, true);
  EXPECT_EQ(s.threads(), threads);
  std::vector<std::atomic<int>> hits(static_cast<size_t>(units));
#pragma omp parallel num_threads(team)
  s.for_each([&](int64_t u) { hits[static_cast<size_t>(u)].fetch_add(1); });
  std::vector<int> out;
  for (const auto& h : hits) out.push_back(h.load());
  return out;
}

TEST(StealingSchedule, EveryUnitRunsOnceWhateverTheTeam) {
  const int saved = omp_get_max_threads();
  for (int64_t units : {0, 1, 2, 7, 64, 1001})
    for (int threads : {1, 2, 3, 5, 8})
      for (int team : {1, 2, threads}) {
        if (team > threads) continue;
        const std::vector<int> hits = run_counts(units, threads, team);
        for (int64_t u = 0; u < units; ++u)
          ASSERT_EQ(hits[static_cast<size_t>(u)], 1)
              << "unit " << u << " of " << units << ", " << threads << " shares, team " << team;
      }
  omp_set_num_threads(saved);
}

TEST(StealingSchedule, OneShareWhenNotParallel) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  StealingSchedule s(10, false);
  EXPECT_EQ(s.threads(), 1);
  std::vector<int64_t> order;
  s.for_each([&](int64_t u) { order.push_back(u); });  // outside any region: thread 0
  ASSERT_EQ(order.size(), 10u);
  for (int64_t u = 0; u < 10; ++u) EXPECT_EQ(order[static_cast<size_t>(u)], u);
  omp_set_num_threads(saved);
}

// Thread 1 starts only after thread 0 has finished: thread 0 must have run every unit, its own
// share first and in order, then thread 1's from the back.
TEST(StealingSchedule, ALateThreadsShareIsTakenByTheOthers) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(2);
  constexpr int64_t kUnits = 100;
  StealingSchedule s(kUnits, true);
  std::vector<int64_t> by0, by1;
  std::atomic<bool> done0{false};
#pragma omp parallel num_threads(2)
  {
    if (omp_get_thread_num() == 0) {
      s.for_each([&](int64_t u) { by0.push_back(u); });
      done0.store(true);
    } else if (omp_get_num_threads() == 2) {
      while (!done0.load()) {
      }
      s.for_each([&](int64_t u) { by1.push_back(u); });
    }
  }
  ASSERT_EQ(by0.size(), size_t(kUnits));
  EXPECT_TRUE(by1.empty());
  for (int64_t u = 0; u < kUnits / 2; ++u) ASSERT_EQ(by0[static_cast<size_t>(u)], u);
  // Thread 1's share [50, 100), stolen half of what is left at a time from the back: [75, 100)
  // first, then [63, 75), ...; each chunk in order and starting below the one before.
  EXPECT_EQ(by0[kUnits / 2], kUnits - kUnits / 4);
  int64_t chunk_start = kUnits;
  for (size_t i = kUnits / 2; i < by0.size(); ++i) {
    if (i == kUnits / 2 || by0[i] != by0[i - 1] + 1) {
      ASSERT_LT(by0[i], chunk_start) << "stolen unit " << i;
      chunk_start = by0[i];
    }
  }
  std::vector<int> seen(kUnits, 0);
  for (int64_t u : by0) ++seen[static_cast<size_t>(u)];
  for (int c : seen) EXPECT_EQ(c, 1);
  omp_set_num_threads(saved);
}

TEST(StealingSchedule, RefusesMoreUnitsThanItCanCount) {
  EXPECT_THROW(StealingSchedule(int64_t(1) << 40, true), Error);
  EXPECT_THROW(StealingSchedule(-1, true), Error);
}

// Counts the iterations of an orphaned worksharing loop in parallel_if's body, per call.
int loop_iterations(bool cond, int n) {
  std::atomic<int> count{0};
  parallel_if(cond, [&] {
#pragma omp for schedule(static)
    for (int i = 0; i < n; ++i) count.fetch_add(1);
  });
  return count.load();
}

TEST(ParallelIf, RegionOnlyWhenAsked) {
  const int saved = omp_get_max_threads();
  omp_set_num_threads(3);
  int team = 0;
  bool in_region = true;
  parallel_if(false, [&] { team = omp_get_num_threads(), in_region = omp_in_parallel(); });
  EXPECT_EQ(team, 1);
  EXPECT_FALSE(in_region);
  std::atomic<int> calls{0};
  parallel_if(true, [&] {
    calls.fetch_add(1);
#pragma omp single
    team = omp_get_num_threads();
  });
  EXPECT_EQ(calls.load(), team);
  EXPECT_EQ(loop_iterations(false, 37), 37);
  EXPECT_EQ(loop_iterations(true, 37), 37);
  omp_set_num_threads(saved);
}

// Called by every thread of an enclosing region with a false condition, each call still runs
// all of its own iterations (an orphaned loop must not bind to the outer team).
TEST(ParallelIf, InsideAnEnclosingRegionEachCallRunsItsWholeLoop) {
  std::vector<int> per_thread(2, -1);
#pragma omp parallel num_threads(2)
  per_thread[static_cast<size_t>(omp_get_thread_num())] = loop_iterations(false, 37);
  EXPECT_EQ(per_thread[0], 37);
  if (per_thread[1] != -1) {
    EXPECT_EQ(per_thread[1], 37);
  }
}

}  // namespace
}  // namespace tensorpar

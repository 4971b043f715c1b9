// What an OpenMP parallel region costs around a tiny body, beside a plain call and beside the
// orphaned-loop form kernels/cpu/parallel_if.h uses below a kernel's threshold: the numbers
// docs/BENCHMARKS.md quotes for "No region below a kernel's threshold".
//
//   g++ -O2 -fopenmp -Isrc bench/standalone/omp_region_cost.cpp -o /tmp/omp_region_cost
//   OMP_NUM_THREADS=2 taskset -c 0,1 /tmp/omp_region_cost
//
// Prints ns per call (200000 calls, three repetitions) of: a region whose `if` clause is false,
// the same body called directly, a two-thread region, and parallel_if's false branch (a direct
// call whose `#pragma omp for` runs every iteration on the caller).
#include <omp.h>

#include <chrono>
#include <cstdio>

#include "kernels/cpu/parallel_if.h"

namespace {

volatile int sink;
float data[64];

__attribute__((noinline)) void body(int n) {
  int s = 0;
  for (int i = 0; i < n; ++i) s += i;
  sink = s;
}

template <class F>
double ns_per_call(int calls, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / calls;
}

}  // namespace

int main() {
  constexpr int kCalls = 200000;
  const int n = 64;
  const bool big = n > 100000;  // false: the bodies are below any threshold
  for (int rep = 0; rep < 3; ++rep) {
    const double if_false = ns_per_call(kCalls, [&] {
#pragma omp parallel if (big)
      body(n);
    });
    const double direct = ns_per_call(kCalls, [&] { body(n); });
    const double team = ns_per_call(kCalls, [&] {
#pragma omp parallel
      body(n);
    });
    const double orphaned = ns_per_call(kCalls, [&] {
      tensorpar::parallel_if(big, [&] {
#pragma omp for schedule(static)
        for (int j = 0; j < n; ++j) data[j] += 1.0f;
      });
    });
    std::printf("region if(false) %.0f ns | direct call %.0f ns | %d-thread region %.0f ns | parallel_if(false) + omp for %.0f ns\n",
                if_false, direct, omp_get_max_threads(), team, orphaned);
  }
  return data[3] > 0 ? 0 : 1;
}

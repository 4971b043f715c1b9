// One decode row of paged attention (9 query heads over 3 kv heads of 64, SmolLM2-135M's
// shape), at 1 and 2 threads: the time a decode step's attention takes per layer, and how much
// of it the second thread saves. docs/BENCHMARKS.md quotes it for "A decode step's few items
// split by the team".
//
//   cmake --build --preset release --target tensorpar_kernels
//   g++ -O2 -fopenmp -std=c++20 -Isrc bench/standalone/paged_attention_decode.cpp
//       build/src/libtensorpar_kernels.a build/src/libtensorpar_core.a -o /tmp/paged_attention_decode
//   (one line)
//   taskset -c 0,1 /tmp/paged_attention_decode 1000
//
// Prints the median of 200 calls at 1, 2, 1, 2 threads for a row at the given position.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/paged_attention.h"

int main(int argc, char** argv) {
  using namespace tensorpar;
  const int64_t nkv = 3, nh = 9, hs = 64, bs = 16, pos = argc > 1 ? std::atoll(argv[1]) : 1000;
  const int64_t n_blocks = (pos + bs) / bs;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  std::mt19937 gen(1);
  std::shuffle(table.begin(), table.end(), gen);
  std::uniform_real_distribution<float> uniform(-1, 1);
  std::vector<float> k(static_cast<size_t>(n_blocks * bs * nkv * hs)), v(k.size()), q(nh * hs), out(q.size());
  for (std::vector<float>* x : {&k, &v, &q})
    for (float& e : *x) e = uniform(gen);
  PagedAttentionDims d;
  d.NH = nh, d.NKV = nkv, d.HS = hs, d.block_size = bs;
  PagedSeq one;
  one.T = 1, one.pos0 = pos, one.blocks = table.data(), one.n_blocks = n_blocks;
  for (int threads : {1, 2, 1, 2}) {
    omp_set_num_threads(threads);
    std::vector<double> us;
    for (int rep = 0; rep < 200; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      paged_attention_forward(out.data(), q.data(), k.data(), v.data(), std::span<const PagedSeq>(&one, 1), d);
      us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(us.begin(), us.end());
    std::printf("position %lld, %d thread(s): median %.1f us\n", static_cast<long long>(pos), threads, us[us.size() / 2]);
  }
  return 0;
}

// A decode step's attention with the cache out of the CPU's caches: one decode row (SmolLM2-135M's
// shape: 9 query heads over 3 kv heads of 64) over 30 layers' separate caches, after a 64 MiB
// sweep that evicts them, an f32 pool against an f16 pool. docs/BENCHMARKS.md quotes it in
// "Attention passes sized to the registers".
//
//   cmake --build --preset release --target tensorpar_kernels
//   g++ -O2 -fopenmp -std=c++20 -Isrc bench/standalone/paged_attention_cold.cpp
//       build/src/libtensorpar_kernels.a build/src/libtensorpar_core.a -o /tmp/paged_attention_cold
//   (one line)
//   taskset -c 0,1 /tmp/paged_attention_cold 1200          # position 1200
//   HUGE=1 taskset -c 0,1 /tmp/paged_attention_cold 1200   # caches on transparent huge pages
//
// Prints the median of 20 steps for each pool, three rounds alternated.
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/cpu/half_convert.h"
#include "kernels/cpu/paged_attention.h"

namespace {

// bytes rounded up to 2 MiB, 2 MiB aligned; with HUGE set, advised to transparent huge pages.
void* cache_alloc(size_t bytes, bool huge) {
  const size_t huge_page = size_t(2) << 20;
  bytes = (bytes + huge_page - 1) / huge_page * huge_page;
  void* p = std::aligned_alloc(huge_page, bytes);
  if (p == nullptr) std::abort();
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  return p;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tensorpar;
  const int64_t nkv = 3, nh = 9, hs = 64, bs = 16, layers = 30, pos = argc > 1 ? std::atoll(argv[1]) : 1200;
  const bool huge = std::getenv("HUGE") != nullptr;
  const int64_t n_blocks = (pos + bs) / bs;
  std::vector<int32_t> table(static_cast<size_t>(n_blocks));
  std::iota(table.begin(), table.end(), 0);
  const size_t per_layer = static_cast<size_t>(n_blocks * bs * nkv * hs), n = per_layer * layers;
  auto* k = static_cast<float*>(cache_alloc(n * sizeof(float), huge));
  auto* v = static_cast<float*>(cache_alloc(n * sizeof(float), huge));
  auto* kh = static_cast<f16*>(cache_alloc(n * sizeof(f16), huge));
  auto* vh = static_cast<f16*>(cache_alloc(n * sizeof(f16), huge));
  std::mt19937 gen(1);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (size_t i = 0; i < n; ++i) k[i] = uniform(gen), v[i] = uniform(gen);
  f32_to_f16_n(kh, k, int64_t(n));
  f32_to_f16_n(vh, v, int64_t(n));
  std::vector<float> q(static_cast<size_t>(nh * hs)), out(q.size());
  for (float& e : q) e = uniform(gen);
  std::vector<char> sweep(size_t(64) << 20, 1);
  PagedAttentionDims d;
  d.NH = nh, d.NKV = nkv, d.HS = hs, d.block_size = bs;
  PagedSeq one;
  one.T = 1, one.pos0 = pos, one.blocks = table.data(), one.n_blocks = n_blocks;
  const std::span<const PagedSeq> seqs(&one, 1);
  for (int round = 0; round < 3; ++round)
    for (bool f16_pool : {false, true}) {
      std::vector<double> us;
      for (int rep = 0; rep < 20; ++rep) {
        for (size_t i = 0; i < sweep.size(); i += 64) ++sweep[i];
        const auto t0 = std::chrono::steady_clock::now();
        for (int64_t l = 0; l < layers; ++l) {
          const size_t at = size_t(l) * per_layer;
          if (f16_pool) paged_attention_forward_f16(out.data(), q.data(), kh + at, vh + at, seqs, d);
          else paged_attention_forward(out.data(), q.data(), k + at, v + at, seqs, d);
        }
        us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(us.begin(), us.end());
      std::printf("%s pool, %lld layers at position %lld%s: median %.0f us a step\n", f16_pool ? "f16" : "f32",
                  static_cast<long long>(layers), static_cast<long long>(pos), huge ? ", huge pages" : "",
                  us[us.size() / 2]);
    }
  std::free(k), std::free(v), std::free(kh), std::free(vh);
  return 0;
}

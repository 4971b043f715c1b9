// Embedding lookup and scatter-add gradient; the plain lookup is the masked one over the
// whole vocabulary, after the ids have been checked.
#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "kernels/cpu/parallel_if.h"

namespace tensorpar {
namespace {

// Below this many elements of work a loop runs on the calling thread: waking a team costs
// more than it saves (decode steps, small test sizes).
constexpr int64_t kMinParallelWork = int64_t(1) << 15;

void check_sizes(const char* where, int64_t N, int64_t v_begin, int64_t v_end, int64_t C) {
  TP_CHECK(N >= 0 && C > 0, "[", where, "] sizes: got N=", N, " C=", C,
           ", expected N >= 0 and C > 0");
  TP_CHECK(0 <= v_begin && v_begin <= v_end, "[", where, "] vocab range: got [", v_begin, ", ",
           v_end, "), expected 0 <= v_begin <= v_end");
}

void check_ids_nonnegative(const char* where, const int64_t* ids, int64_t N) {
  for (int64_t n = 0; n < N; ++n)
    TP_CHECK(ids[n] >= 0, "[", where, "] token id: got ", ids[n], " at position ", n,
             ", expected >= 0");
}

}  // namespace

void embedding_forward_masked(float* out, const int64_t* ids, const float* table_local, int64_t N,
                              int64_t v_begin, int64_t v_end, int64_t C) {
  check_sizes("embedding_forward_masked", N, v_begin, v_end, C);
  check_ids_nonnegative("embedding_forward_masked", ids, N);
  parallel_if(N * C > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      float* o = out + n * C;  // (C)
      const int64_t id = ids[n];
      if (id >= v_begin && id < v_end)
        std::memcpy(o, table_local + (id - v_begin) * C, static_cast<size_t>(C) * sizeof(float));
      else
        std::fill(o, o + C, 0.0f);
    }
  });
}

void embedding_backward_masked(float* d_table_local, const float* d_out, const int64_t* ids,
                               int64_t N, int64_t v_begin, int64_t v_end, int64_t C) {
  check_sizes("embedding_backward_masked", N, v_begin, v_end, C);
  check_ids_nonnegative("embedding_backward_masked", ids, N);
  // Repeated ids would race if rows were split among threads; columns are split instead, so
  // every element is summed in row order whatever the thread count.
  constexpr int64_t kBlock = 64;
  const int64_t n_blocks = (C + kBlock - 1) / kBlock;
  parallel_if(N * C > kMinParallelWork, [&] {
#pragma omp for schedule(static)
    for (int64_t b = 0; b < n_blocks; ++b) {
      const int64_t c0 = b * kBlock, c1 = std::min(C, c0 + kBlock);
      for (int64_t n = 0; n < N; ++n) {
        const int64_t id = ids[n];
        if (id < v_begin || id >= v_end) continue;
        float* dt = d_table_local + (id - v_begin) * C;
        const float* dout = d_out + n * C;
        for (int64_t c = c0; c < c1; ++c) dt[c] += dout[c];
      }
    }
  });
}

void embedding_forward(float* out, const int64_t* ids, const float* table, int64_t N, int64_t V,
                       int64_t C) {
  for (int64_t n = 0; n < N; ++n)
    TP_CHECK(ids[n] >= 0 && ids[n] < V, "[embedding_forward] token id: got ", ids[n],
             " at position ", n, ", expected in [0, ", V, ")");
  embedding_forward_masked(out, ids, table, N, 0, V, C);
}

void embedding_backward(float* d_table, const float* d_out, const int64_t* ids, int64_t N,
                        int64_t V, int64_t C) {
  for (int64_t n = 0; n < N; ++n)
    TP_CHECK(ids[n] >= 0 && ids[n] < V, "[embedding_backward] token id: got ", ids[n],
             " at position ", n, ", expected in [0, ", V, ")");
  embedding_backward_masked(d_table, d_out, ids, N, 0, V, C);
}

}  // namespace tensorpar

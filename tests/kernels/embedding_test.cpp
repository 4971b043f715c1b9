// Embedding lookup: forward against a direct copy, backward against a double-precision
// scatter and finite differences, the vocab-sharded (masked) variant against the full one.
#include "kernels/cpu/embedding.h"

#include <algorithm>

#include "grad_check.h"
#include "test_util.h"

namespace tensorpar {
namespace {

using testing::expect_close;
using testing::nan_vec;
using testing::Rng;

std::vector<int64_t> random_ids(Rng& rng, int64_t N, int64_t V) {
  std::vector<int64_t> ids(static_cast<size_t>(N));
  for (auto& id : ids) id = rng.integer(0, V);
  return ids;
}

TEST(Embedding, ForwardCopiesRows) {
  TP_SEED_TRACE();
  Rng rng(1);
  for (int64_t N : {1, 7, 33, 577})
    for (int64_t C : {1, 7, 33}) {
      const int64_t V = 37;
      const auto table = rng.uniform_vec(static_cast<size_t>(V * C));
      const auto ids = random_ids(rng, N, V);
      auto out = nan_vec(static_cast<size_t>(N * C));
      embedding_forward(out.data(), ids.data(), table.data(), N, V, C);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          ASSERT_EQ(out[static_cast<size_t>(n * C + c)],
                    table[static_cast<size_t>(ids[static_cast<size_t>(n)] * C + c)])
              << "N=" << N << " C=" << C << " n=" << n << " c=" << c;
    }
}

TEST(Embedding, BackwardScatterAddsWithRepeatedIds) {
  TP_SEED_TRACE();
  Rng rng(2);
  for (int64_t N : {1, 7, 33, 577})
    for (int64_t C : {1, 7, 33, 130}) {
      const int64_t V = 5;  // few ids: many repeats
      const auto ids = random_ids(rng, N, V);
      const auto d_out = rng.uniform_vec(static_cast<size_t>(N * C));
      const auto init = rng.uniform_vec(static_cast<size_t>(V * C));  // accumulates onto this
      std::vector<double> want = testing::to_double(init);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          want[static_cast<size_t>(ids[static_cast<size_t>(n)] * C + c)] +=
              d_out[static_cast<size_t>(n * C + c)];
      auto d_table = init;
      embedding_backward(d_table.data(), d_out.data(), ids.data(), N, V, C);
      // float sums of up to N terms of size 1
      expect_close(d_table, want, 1e-6 * static_cast<double>(N), 1e-6, "d_table");
    }
}

TEST(Embedding, BackwardMatchesFiniteDifferences) {
  TP_SEED_TRACE();
  Rng rng(3);
  const int64_t N = 9, V = 4, C = 7;
  const auto ids = random_ids(rng, N, V);
  const auto table = rng.uniform_vec(static_cast<size_t>(V * C));
  const auto w = testing::to_double(rng.uniform_vec(static_cast<size_t>(N * C)));
  auto loss = [&](const std::vector<double>& tab) {
    double s = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        s += tab[static_cast<size_t>(ids[static_cast<size_t>(n)] * C + c)] *
             w[static_cast<size_t>(n * C + c)];
    return s;
  };
  const auto want = testing::numeric_grad(loss, testing::to_double(table));
  std::vector<float> d_table(static_cast<size_t>(V * C), 0.0f);
  const auto d_out = testing::to_float(w);
  embedding_backward(d_table.data(), d_out.data(), ids.data(), N, V, C);
  expect_close(d_table, want, 1e-5, 1e-5, "d_table vs finite differences");
}

TEST(Embedding, MaskedShardsSumToTheFullLookup) {
  TP_SEED_TRACE();
  Rng rng(4);
  const int64_t N = 33, V = 50, C = 7;
  const int64_t bounds[] = {0, 17, 18, 50};  // uneven shards, one of a single row
  const auto table = rng.uniform_vec(static_cast<size_t>(V * C));
  const auto ids = random_ids(rng, N, V);
  const auto d_out = rng.uniform_vec(static_cast<size_t>(N * C));
  std::vector<float> full(static_cast<size_t>(N * C)), d_full(static_cast<size_t>(V * C), 0.0f);
  embedding_forward(full.data(), ids.data(), table.data(), N, V, C);
  embedding_backward(d_full.data(), d_out.data(), ids.data(), N, V, C);
  std::vector<double> sum(static_cast<size_t>(N * C), 0.0);
  for (int s = 0; s < 3; ++s) {
    const int64_t vb = bounds[s], ve = bounds[s + 1];
    auto out = nan_vec(static_cast<size_t>(N * C));
    embedding_forward_masked(out.data(), ids.data(), table.data() + vb * C, N, vb, ve, C);
    for (int64_t n = 0; n < N; ++n) {
      const bool owned = ids[static_cast<size_t>(n)] >= vb && ids[static_cast<size_t>(n)] < ve;
      for (int64_t c = 0; c < C; ++c) {
        const float o = out[static_cast<size_t>(n * C + c)];
        if (!owned) {
          ASSERT_EQ(o, 0.0f) << "row " << n << " not owned by shard " << s;
        }
        sum[static_cast<size_t>(n * C + c)] += o;
      }
    }
    std::vector<float> d_local(static_cast<size_t>((ve - vb) * C), 0.0f);
    embedding_backward_masked(d_local.data(), d_out.data(), ids.data(), N, vb, ve, C);
    const std::vector<float> want(d_full.begin() + vb * C, d_full.begin() + ve * C);
    expect_close(d_local, want, 0, 0, "masked d_table of shard " + std::to_string(s));
  }
  expect_close(full, sum, 0, 0, "sum of masked lookups");
}

TEST(Embedding, BackwardDoesNotDependOnThreadCount) {
  TP_SEED_TRACE();
  Rng rng(5);
  const int64_t N = 577, V = 9, C = 200;  // many repeated ids, above the parallel threshold
  const auto ids = random_ids(rng, N, V);
  const auto d_out = rng.uniform_vec(static_cast<size_t>(N * C));
  std::vector<float> d[2];
  for (int run = 0; run < 2; ++run)
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      d[run].assign(static_cast<size_t>(V * C), 0.0f);
      embedding_backward(d[run].data(), d_out.data(), ids.data(), N, V, C);
    });
  EXPECT_EQ(d[0], d[1]);
}

TEST(Embedding, BadIdsAreErrorsNamingIdAndPosition) {
  const int64_t V = 10, C = 3;
  std::vector<float> table(static_cast<size_t>(V * C), 1.0f), out(9);
  std::vector<int64_t> ids = {1, 2, 10};
  testing::expect_error_with(
      [&] { embedding_forward(out.data(), ids.data(), table.data(), 3, V, C); },
      {"[embedding_forward]", "got 10", "position 2"});
  ids = {-1, 0, 0};
  testing::expect_error_with(
      [&] { embedding_backward(table.data(), out.data(), ids.data(), 3, V, C); },
      {"[embedding_backward]", "got -1", "position 0"});
  testing::expect_error_with(
      [&] { embedding_forward_masked(out.data(), ids.data(), table.data(), 3, 0, 5, C); },
      {"[embedding_forward_masked]", "got -1"});
}

}  // namespace
}  // namespace tensorpar

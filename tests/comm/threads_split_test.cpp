// Sub-groups of the threads backend from split(color, key): 2x2 and 2x3 meshes whose TP and DP
// groups are used concurrently and interleaved, (key, old rank) ordering, and opting out.
#include <gtest/gtest.h>

#include <atomic>

#include "comm_test_util.h"

namespace tensorpar::testing {
namespace {

// A tp x dp mesh, TP fastest (ranks tp-neighbours). Each rank all-reduces over its TP group and
// then over its DP group, several times with sizes on both paths; results checked exactly.
void run_mesh(int tp, int dp) {
  const int n = tp * dp;
  std::atomic<int> failures{0};
  run_threads(n, [&](Communicator& world) {
    const int r = world.rank();
    auto tp_group = world.split(/*color=*/r / tp, /*key=*/r % tp);
    auto dp_group = world.split(/*color=*/r % tp, /*key=*/r / tp);
    ASSERT_TRUE(tp_group && dp_group);
    EXPECT_EQ(tp_group->size(), tp);
    EXPECT_EQ(dp_group->size(), dp);
    EXPECT_EQ(tp_group->rank(), r % tp);
    EXPECT_EQ(dp_group->rank(), r / tp);
    EXPECT_NE(tp_group->name(), world.name());
    for (int it = 0; it < 8; ++it) {
      const int64_t len = it % 2 ? 50000 : 37;  // staged and direct paths
      // TP: sum of world ranks in my TP group = sum over t of (r/tp)*tp + t.
      std::vector<int64_t> x(static_cast<size_t>(len), r + it);
      tp_group->all_reduce(x.data(), x.data(), len, DType::kI64, ReduceOp::kSum);
      const int64_t base = (r / tp) * tp;
      const int64_t want_tp = tp * base + tp * (tp - 1) / 2 + int64_t(tp) * it;
      for (int64_t v : x)
        if (v != want_tp) { failures++; break; }
      // DP: sum over d of (d*tp + r%tp + it).
      std::vector<float> y(static_cast<size_t>(len), float(r + it));
      dp_group->all_reduce(y.data(), y.data(), len, DType::kF32, ReduceOp::kSum);
      const float want_dp = float(tp * dp * (dp - 1) / 2 + dp * (r % tp) + dp * it);
      for (float v : y)
        if (v != want_dp) { failures++; break; }
      // A gather over TP of the DP results.
      std::vector<float> g(static_cast<size_t>(tp), -1.f);
      tp_group->all_gather(&y[0], g.data(), 1, DType::kF32);
      for (int t = 0; t < tp; ++t)
        if (g[size_t(t)] != float(tp * dp * (dp - 1) / 2 + dp * t + dp * it)) failures++;
    }
    world.barrier();
  });
  EXPECT_EQ(failures.load(), 0);
}

TEST(ThreadsSplit, Mesh2x2) { run_mesh(2, 2); }
TEST(ThreadsSplit, Mesh2x3) { run_mesh(2, 3); }
TEST(ThreadsSplit, Mesh3x2) { run_mesh(3, 2); }

TEST(ThreadsSplit, KeyOrdersRanksAndNegativeColorOptsOut) {
  const int n = 5;
  std::atomic<int> failures{0};
  run_threads(n, [&](Communicator& world) {
    const int r = world.rank();
    auto reversed = world.split(0, -r);  // one group, ranks reversed
    if (!reversed || reversed->rank() != n - 1 - r || reversed->size() != n) failures++;
    // Ties in key keep the old order.
    auto tied = world.split(0, 7);
    if (!tied || tied->rank() != r) failures++;
    // Odd ranks opt out.
    auto evens = world.split(r % 2 == 0 ? 0 : -1, r);
    if ((r % 2 == 0) != bool(evens)) failures++;
    if (evens) {
      int32_t v = r;
      evens->all_reduce(&v, &v, 1, DType::kI32, ReduceOp::kMax);
      if (v != 4) failures++;
      auto nested = evens->split(evens->rank() % 2, 0);  // splits of splits
      int32_t w = 1;
      nested->all_reduce(&w, &w, 1, DType::kI32, ReduceOp::kSum);
      if (w != (evens->rank() % 2 == 0 ? 2 : 1)) failures++;
    }
    // The reversed group's broadcast root is old rank n-1.
    int64_t b = r;
    reversed->broadcast(&b, 1, DType::kI64, 0);
    if (b != n - 1) failures++;
  });
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace tensorpar::testing

// TimedCommunicator: calls reach the inner backend unchanged, and the time of calls on groups
// split from it adds to the same total (a training run's mesh splits tp/dp/pp groups from one
// timed world).
#include "comm/timed_communicator.h"

#include <gtest/gtest.h>

#include "comm/comm_test_util.h"

namespace tensorpar::testing {
namespace {

TEST(TimedCommunicator, SplitGroupsAddToTheSameTotal) {
  run_threads(4, [](Communicator& world) {
    TimedCommunicator timed(world);
    EXPECT_EQ(timed.seconds(), 0.0);
    // Two groups of two: ranks {0, 2} and {1, 3}.
    std::unique_ptr<Communicator> group = timed.split(world.rank() % 2, world.rank());
    ASSERT_EQ(group->size(), 2);
    const double after_split = timed.seconds();
    EXPECT_GT(after_split, 0.0);  // the split is a call too
    float x = float(world.rank());
    group->all_reduce(&x, &x, 1, DType::kF32, ReduceOp::kSum);
    EXPECT_EQ(x, float(world.rank() % 2 == 0 ? 0 + 2 : 1 + 3));
    const double after_group = timed.seconds();
    EXPECT_GT(after_group, after_split);  // a call on the group counts in the world's total
    std::unique_ptr<Communicator> sub = group->split(0, 0);  // a group of a group: still timed
    sub->barrier();
    EXPECT_GT(timed.seconds(), after_group);
  });
}

}  // namespace
}  // namespace tensorpar::testing

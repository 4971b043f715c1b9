// TENSORPAR_FAULT: the spec parser (strict, errors naming the bad part) and each action under the
// threads backend, installed by launch_ranks: every surviving rank must fail with an error naming
// the failed rank and the operation, and launch_ranks must return (no hang). Nothing here
// measures time: a stalled rank is waited out by the configured timeout alone.
#include "comm/fault_injection.h"

#include <gtest/gtest.h>

#include <mutex>

#include "comm_test_util.h"

namespace tensorpar::testing {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(FaultSpec, ParsesEveryField) {
  const FaultSpec a = parse_fault_spec("rank:1,op:all_reduce,after:37,action:kill");
  EXPECT_EQ(a.rank, 1);
  ASSERT_TRUE(a.op.has_value());
  EXPECT_EQ(*a.op, CommOp::kAllReduce);
  EXPECT_EQ(a.after, 37);
  EXPECT_EQ(a.action, FaultAction::kKill);
  const FaultSpec b = parse_fault_spec("action:stall,after:0,op:any,rank:0");  // any order
  EXPECT_FALSE(b.op.has_value());
  EXPECT_EQ(b.action, FaultAction::kStall);
  EXPECT_EQ(parse_fault_spec("rank:2,op:broadcast,after:3,action:throw").op, CommOp::kBroadcast);
}

TEST(FaultSpec, BadSpecsAreNamed) {
  const std::pair<const char*, const char*> cases[] = {
      {"", "is not key:value"},
      {"rank:1,op:all_reduce,after:37", "must all be given"},
      {"rank:1,op:all_reduce,after:37,action:explode", "unknown action 'explode'"},
      {"rank:1,op:allreduce,after:37,action:kill", "unknown op 'allreduce'"},
      {"rank:-1,op:all_reduce,after:37,action:kill", "rank:-1 is not a non-negative integer"},
      {"rank:1,op:all_reduce,after:3x,action:kill", "after:3x is not a non-negative integer"},
      {"rank:1,rank:2,op:all_reduce,after:3,action:kill", "rank is given twice"},
      {"rank:1,op:all_reduce,after:3,action:kill,when:now", "unknown key 'when'"},
      {"rank:1,op:all_reduce,after:3,action:kill,", "is not key:value"},
      {"rank 1", "is not key:value"},
  };
  for (const auto& [spec, want] : cases) {
    try {
      parse_fault_spec(spec);
      ADD_FAILURE() << "accepted '" << spec << "'";
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e.what(), want)) << spec << ": " << e.what();
      EXPECT_TRUE(contains(e.what(), "[TENSORPAR_FAULT]")) << e.what();
      EXPECT_TRUE(contains(e.what(), "rank:R,op:OP,after:N,action:kill|stall|throw")) << e.what();
    }
  }
}

struct CountedFaultRun : FaultRun {
  std::vector<int64_t> completed;  // all_reduces each rank finished
};

// n ranks, each doing a tp-like split then 100 all-reduces on alternating groups; fault as given.
CountedFaultRun run_with_fault(int n, const std::string& fault, const CommOptions& opts = test_comm_options()) {
  CountedFaultRun out;
  out.completed.assign(size_t(n), 0);
  std::mutex mu;
  static_cast<FaultRun&>(out) = run_ranks_with_fault(n, fault, opts, [&](Communicator& world) {
    const int r = world.rank();
    auto pair = world.split(r / 2, r);
    std::vector<float> x(256, 1.f);
    for (int it = 0; it < 100; ++it) {
      Communicator& c = it % 2 ? *pair : world;
      c.all_reduce(x.data(), x.data(), int64_t(x.size()), DType::kF32, ReduceOp::kMax);
      std::lock_guard<std::mutex> lock(mu);
      ++out.completed[size_t(r)];
    }
  });
  return out;
}

// Throw: the thrower's own error, and every peer's abort quoting it.
TEST(FaultInjection, ThrowNamesTheRankAndTheOpOnEverySurvivor) {
  const CountedFaultRun run = run_with_fault(4, "rank:1,op:all_reduce,after:37,action:throw");
  EXPECT_TRUE(contains(run.launch_error, "rank 1 of 4 failed")) << run.launch_error;
  EXPECT_TRUE(contains(run.launch_error, "rank 1 threw at its all_reduce call #38")) << run.launch_error;
  EXPECT_EQ(run.completed[1], 37);
  for (int r : {0, 2, 3}) {
    const std::string& e = run.rank_errors[size_t(r)];
    EXPECT_TRUE(contains(e, "aborted") && contains(e, "rank 1 threw at its all_reduce call #38")) << r << ": " << e;
    EXPECT_LT(run.completed[size_t(r)], 100) << r;
  }
}

// Kill: the dead rank says nothing to its peers; they find it gone.
TEST(FaultInjection, KillIsSeenAsARankThatLeft) {
  const CountedFaultRun run = run_with_fault(3, "rank:1,op:all_reduce,after:37,action:kill");
  EXPECT_TRUE(contains(run.launch_error, "rank 1 of 3 failed")) << run.launch_error;
  EXPECT_TRUE(contains(run.launch_error, "rank 1 killed at its all_reduce call #38")) << run.launch_error;
  EXPECT_TRUE(run.rank_errors[1].empty()) << "a killed rank reports nothing: " << run.rank_errors[1];
  EXPECT_EQ(run.completed[1], 37);
  for (int r : {0, 2}) {
    const std::string& e = run.rank_errors[size_t(r)];
    // Rank 0 shares both groups with rank 1 and finds it gone; rank 2 (in the other pair) learns
    // of it through rank 0's abort. Either way the message names rank 1 and the all_reduce.
    EXPECT_TRUE(contains(e, "rank 1 of threads:world") && contains(e, "exited") && contains(e, "all_reduce"))
        << r << ": " << e;
  }
}

// Stall: only the peers' timeout can end their wait (a short one, spanning the 37 calls before on
// a busy machine); then the stalled rank is released by the abort.
TEST(FaultInjection, StallTimesOutThePeersNamingTheRank) {
  const double timeout = 3;
  const CountedFaultRun run = run_with_fault(2, "rank:1,op:all_reduce,after:37,action:stall", test_comm_options(timeout));
  EXPECT_TRUE(contains(run.launch_error, "timed out after 3 s waiting for rank 1 in all_reduce")) << run.launch_error;
  EXPECT_TRUE(contains(run.rank_errors[0], "waiting for rank 1 in all_reduce")) << run.rank_errors[0];
  EXPECT_TRUE(contains(run.rank_errors[1], "rank 1 stalled at its all_reduce call #38") &&
              contains(run.rank_errors[1], "released after its peers gave up"))
      << run.rank_errors[1];
  EXPECT_EQ(run.completed[1], 37);
  EXPECT_EQ(run.completed[0], 37);
}

TEST(FaultInjection, AnyOpCountsEveryCallAndSplitsAreWrapped) {
  // Calls of rank 2: split (1), then all_reduces; "any" with after:5 fires at its 5th all_reduce.
  const CountedFaultRun run = run_with_fault(4, "rank:2,op:any,after:5,action:throw");
  EXPECT_TRUE(contains(run.launch_error, "rank 2 threw at its all_reduce call #6")) << run.launch_error;
  EXPECT_EQ(run.completed[2], 4);
  const CountedFaultRun bad = run_with_fault(2, "rank:2,op:any,after:5,action:throw");
  EXPECT_TRUE(contains(bad.launch_error, "rank 2 is not in the world of 2 ranks")) << bad.launch_error;
}

}  // namespace
}  // namespace tensorpar::testing

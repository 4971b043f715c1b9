// CommThread: background collectives give the blocking ones' results (checked against a naive
// sum), in submission order, while the caller runs its own collectives on the same group; a
// failure (an injected throw, kill or stall on one rank's communication thread) reaches every
// rank's wait() as an error naming the rank, within the configured timeout; a rank that unwinds
// with operations queued does not hang. Nothing here measures time.
#include "comm/comm_thread.h"

#include <gtest/gtest.h>

#include <mutex>
#include <vector>

#include "comm_test_util.h"

namespace tensorpar::testing {
namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Rank r's input k of n elements: distinct per rank, op and element, exact in f32.
std::vector<float> input(int r, int k, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float((r + 1) * 1000 + k * 10 + (i % 7));
  return x;
}

TEST(CommThread, BackgroundReductionsEqualANaiveSumAlongsideTheCallersOwnCollectives) {
  for (int n : {1, 2, 3}) {
    run_threads(n, [n](Communicator& world) {
      CommThread comm(world);
      EXPECT_EQ(comm.size(), n);
      EXPECT_EQ(comm.rank(), world.rank());
      // Sizes on both sides of the threads backend's staged/direct threshold.
      const std::vector<int64_t> sizes{1, 7, 1000, 70000, 3, 300000};
      std::vector<std::vector<float>> bufs;
      for (size_t k = 0; k < sizes.size(); ++k) bufs.push_back(input(world.rank(), int(k), sizes[k]));
      std::vector<int> order;  // written by the communication thread only, read after wait_all
      std::vector<int64_t> tickets;
      for (size_t k = 0; k < sizes.size(); ++k) {
        tickets.push_back(comm.submit([&, k](Communicator& c) {
          c.all_reduce(bufs[k].data(), bufs[k].data(), sizes[k], DType::kF32, ReduceOp::kSum);
          order.push_back(int(k));
        }));
        // The caller's own collective on the same group while the thread works.
        float mine = float(world.rank() + 1);
        world.all_reduce(&mine, &mine, 1, DType::kF32, ReduceOp::kSum);
        EXPECT_EQ(mine, float(n * (n + 1) / 2));
      }
      EXPECT_EQ(tickets.front(), 1);
      EXPECT_EQ(tickets.back(), int64_t(sizes.size()));
      comm.wait(tickets[1]);
      comm.wait_all();
      EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5}));
      for (size_t k = 0; k < sizes.size(); ++k) {
        std::vector<float> want(static_cast<size_t>(sizes[k]), 0.0f);
        for (int r = 0; r < n; ++r) {
          const std::vector<float> x = input(r, int(k), sizes[k]);
          for (size_t i = 0; i < want.size(); ++i) want[i] += x[i];
        }
        EXPECT_EQ(bufs[k], want) << "op " << k << " at " << n << " ranks";
      }
      EXPECT_THROW(comm.wait(int64_t(sizes.size()) + 1), Error);  // never submitted
    });
  }
}

// n ranks, each submitting 20 background all-reduces and waiting for each; the fault as given
// (its call count runs over the split that makes the thread's group, then the all-reduces).
FaultRun run_with_fault(int n, const std::string& fault, const CommOptions& opts = test_comm_options()) {
  return run_ranks_with_fault(n, fault, opts, [](Communicator& world) {
    CommThread comm(world);
    std::vector<float> x(512, 1.0f);
    for (int it = 0; it < 20; ++it) {
      const int64_t t = comm.submit([&x](Communicator& c) {
        c.all_reduce(x.data(), x.data(), int64_t(x.size()), DType::kF32, ReduceOp::kMax);
      });
      comm.wait(t);
    }
  });
}

TEST(CommThread, AThrowOnOneRanksThreadReachesEveryRanksWait) {
  const FaultRun run = run_with_fault(3, "rank:2,op:all_reduce,after:5,action:throw");
  EXPECT_TRUE(contains(run.launch_error, "rank 2 of 3 failed")) << run.launch_error;
  EXPECT_TRUE(contains(run.rank_errors[2], "rank 2 threw at its all_reduce call #6")) << run.rank_errors[2];
  for (int r : {0, 1})
    EXPECT_TRUE(contains(run.rank_errors[size_t(r)], "rank 2 threw at its all_reduce call #6")) << r << ": "
                                                                                                << run.rank_errors[size_t(r)];
}

TEST(CommThread, AKillOnTheThreadEndsThatRankAndItsPeersSeeItGone) {
  const FaultRun run = run_with_fault(2, "rank:1,op:all_reduce,after:3,action:kill");
  EXPECT_TRUE(contains(run.launch_error, "rank 1 killed at its all_reduce call #4")) << run.launch_error;
  EXPECT_TRUE(run.rank_errors[1].empty()) << "a killed rank reports nothing: " << run.rank_errors[1];
  EXPECT_TRUE(contains(run.rank_errors[0], "rank 1 of threads:world") && contains(run.rank_errors[0], "exited"))
      << run.rank_errors[0];
}

TEST(CommThread, AStallIsEndedByThePeersTimeout) {
  const FaultRun run = run_with_fault(2, "rank:0,op:all_reduce,after:2,action:stall", test_comm_options(2));
  EXPECT_TRUE(contains(run.rank_errors[1], "timed out after 2 s waiting for rank 0 in all_reduce"))
      << run.rank_errors[1];
  EXPECT_TRUE(contains(run.rank_errors[0], "rank 0 stalled at its all_reduce call #3")) << run.rank_errors[0];
}

// A rank that fails in its own code with operations queued: unwinding drops those not started
// (the one running is matched by the peer, which submitted the same ones), launch_ranks returns,
// and the peer's wait fails by the abort instead of waiting for operations that never come.
TEST(CommThread, UnwindingWithOperationsQueuedDoesNotHang) {
  LaunchConfig cfg;
  cfg.n_ranks = 2;
  cfg.threads_per_rank = 1;
  cfg.comm = test_comm_options();
  std::string peer_error;
  try {
    launch_ranks(cfg, [&peer_error](Communicator& world) {
      std::vector<float> x(64, 1.0f);
      CommThread comm(world);
      for (int k = 0; k < 8; ++k)
        comm.submit([&x](Communicator& c) { c.all_reduce(x.data(), x.data(), 64, DType::kF32, ReduceOp::kSum); });
      if (world.rank() == 0) throw Error("rank 0's own failure");
      try {
        comm.wait_all();
        world.barrier();  // rank 0 never comes: ended by the abort
      } catch (const Error& e) {
        peer_error = e.what();
        throw;
      }
    });
    ADD_FAILURE() << "the failure was lost";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "rank 0 of 2 failed") && contains(e.what(), "rank 0's own failure")) << e.what();
  }
  EXPECT_TRUE(contains(peer_error, "rank 0's own failure")) << peer_error;
}

}  // namespace
}  // namespace tensorpar::testing

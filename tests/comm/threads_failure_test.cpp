// Failure behaviour of the threads backend: a rank that throws, returns early or stalls makes
// every other rank fail with an Error naming the op, the group and the rank at fault;
// mismatched collectives are reported with both sides instead of hanging. No assertion rests on
// how fast a busy machine runs: a stalled rank waits until its peers have failed (an ordering,
// not a sleep), and a failure that must not come from the timeout is told apart by its message
// and by arriving before the configured timeout (TENSORPAR_COMM_TIMEOUT) could have fired.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>

#include "comm_test_util.h"

namespace tensorpar::testing {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Counts ranks that have failed, so that a rank can stall until its peers gave up on it.
class FailureCount {
 public:
  void add() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      ++n_;
    }
    cv_.notify_all();
  }
  // Waits until at least n ranks have failed; false after limit_s (a bug: the test then fails
  // instead of hanging).
  bool wait_for(int n, double limit_s) {
    std::unique_lock<std::mutex> lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(limit_s), [&] { return n_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int n_ = 0;
};

// Runs fn on n ranks, expecting launch_ranks to throw; collects every rank's error message.
struct FailureRun {
  std::string launch_error;
  std::vector<std::string> rank_errors;
  std::vector<double> rank_fail_s;  // seconds from start until that rank's error
};

FailureRun run_failing(int n, const CommOptions& opts, const std::function<void(Communicator&)>& fn,
                       FailureCount* failures = nullptr) {
  FailureRun out;
  out.rank_errors.resize(size_t(n));
  out.rank_fail_s.assign(size_t(n), -1);
  const auto start = Clock::now();
  try {
    run_threads(n, [&](Communicator& c) {
      try {
        fn(c);
      } catch (const std::exception& e) {
        out.rank_errors[size_t(c.rank())] = e.what();
        out.rank_fail_s[size_t(c.rank())] = seconds_since(start);
        if (failures) failures->add();
        throw;
      }
    }, opts);
  } catch (const Error& e) {
    out.launch_error = e.what();
  }
  return out;
}

// The configured timeout: long enough that a correct run never reaches it on a busy machine.
double patient_s() { return test_comm_options().timeout_s; }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The peers learn of the throw through the abort (their message carries the thrower's), long
// before their timeout could fire.
TEST(ThreadsFailure, RankThatThrowsAbortsEveryone) {
  const auto run = run_failing(4, test_comm_options(), [](Communicator& c) {
    std::vector<float> x(1000, 1.f);
    for (int it = 0; it < 100000; ++it) {
      if (c.rank() == 2 && it == 3) throw Error("[test] boom on purpose");
      c.all_reduce(x.data(), x.data(), 1000, DType::kF32, ReduceOp::kSum);
      std::fill(x.begin(), x.end(), 1.f);
    }
  });
  EXPECT_TRUE(contains(run.launch_error, "rank 2")) << run.launch_error;
  EXPECT_TRUE(contains(run.launch_error, "boom on purpose")) << run.launch_error;
  for (int r : {0, 1, 3}) {
    const std::string& e = run.rank_errors[size_t(r)];
    EXPECT_TRUE(contains(e, "all_reduce") && contains(e, "threads:world") && contains(e, "aborted") &&
                contains(e, "rank 2") && contains(e, "boom on purpose"))
        << "rank " << r << ": " << e;
    EXPECT_LT(run.rank_fail_s[size_t(r)], patient_s()) << "rank " << r;
  }
}

// Noticed from the exit flag, not waited out: the message says the rank returned.
TEST(ThreadsFailure, RankThatReturnsEarlyFailsThePeers) {
  const auto run = run_failing(3, test_comm_options(), [](Communicator& c) {
    int64_t v = 1;
    const int ops = c.rank() == 1 ? 2 : 5;
    for (int it = 0; it < ops; ++it) c.all_reduce(&v, &v, 1, DType::kI64, ReduceOp::kSum);
  });
  EXPECT_FALSE(run.launch_error.empty());
  for (int r : {0, 2}) {
    const std::string& e = run.rank_errors[size_t(r)];
    EXPECT_TRUE(contains(e, "rank 1 of threads:world exited (its function returned, or the rank died) without reaching all_reduce #3"))
        << "rank " << r << ": " << e;
    EXPECT_LT(run.rank_fail_s[size_t(r)], patient_s()) << "rank " << r;
  }
  EXPECT_TRUE(run.rank_errors[1].empty());
}

// Rank 2 stalls in its third step until both peers have failed: nothing but their own timeout
// can end their wait, so the test shows the timeout fires (however slow the machine) without a
// sleep that a busy machine might outlast. The timeout is short but spans the two steps before
// (a peer would have to be starved that long to be blamed instead of rank 2).
TEST(ThreadsFailure, StalledRankTimesOutThePeers) {
  const double timeout = 2;
  FailureCount failed;
  const auto run = run_failing(3, test_comm_options(timeout), [&](Communicator& c) {
    std::vector<float> x(100000, 1.f);  // the direct path
    for (int it = 0; it < 4; ++it) {
      if (c.rank() == 2 && it == 2) {
        EXPECT_TRUE(failed.wait_for(2, patient_s())) << "the peers never timed out";
      }
      c.all_reduce(x.data(), x.data(), int64_t(x.size()), DType::kF32, ReduceOp::kSum);
    }
  }, &failed);
  EXPECT_TRUE(contains(run.launch_error, "timed out after 2 s waiting for rank 2 in all_reduce #3")) << run.launch_error;
  for (int r : {0, 1}) {
    const std::string& e = run.rank_errors[size_t(r)];
    EXPECT_TRUE(contains(e, "rank 2") && contains(e, "all_reduce") && contains(e, "threads:world")) << e;
    EXPECT_GE(run.rank_fail_s[size_t(r)], timeout) << "rank " << r << ": " << e;
  }
  // The stalled rank finds the group aborted when it comes back.
  EXPECT_TRUE(contains(run.rank_errors[2], "aborted")) << run.rank_errors[2];
}

TEST(ThreadsFailure, AbortReachesSubGroups) {
  const auto run = run_failing(4, test_comm_options(), [](Communicator& world) {
    const int r = world.rank();
    auto tp = world.split(r / 2, r);
    auto dp = world.split(r % 2, r);
    float x = 1;
    for (int it = 0; it < 1000; ++it) {
      if (r == 3 && it == 5) throw Error("[test] rank 3 gives up");
      tp->all_reduce(&x, &x, 1, DType::kF32, ReduceOp::kMax);
      dp->all_reduce(&x, &x, 1, DType::kF32, ReduceOp::kMax);
    }
  });
  EXPECT_TRUE(contains(run.launch_error, "rank 3 gives up")) << run.launch_error;
  for (int r : {0, 1, 2}) {
    EXPECT_TRUE(contains(run.rank_errors[size_t(r)], "rank 3 gives up")) << run.rank_errors[size_t(r)];
    EXPECT_TRUE(contains(run.rank_errors[size_t(r)], "threads:world/")) << run.rank_errors[size_t(r)];
    EXPECT_LT(run.rank_fail_s[size_t(r)], patient_s());
  }
}

// Mismatches are found when both ranks meet, whenever that is: a patient timeout, never a race.
void expect_mismatch_message(bool debug) {
  CommOptions opts = test_comm_options();
  opts.debug = debug;
  const auto run = run_failing(2, opts, [](Communicator& c) {
    std::vector<float> a(1024, 1.f), b(1024, 0.f);
    for (int it = 0; it < 6; ++it) c.all_reduce(a.data(), a.data(), 1, DType::kF32, ReduceOp::kSum);
    if (c.rank() == 0) {
      c.all_reduce(a.data(), a.data(), 1024, DType::kF32, ReduceOp::kSum);
    } else {
      c.all_gather(a.data(), b.data(), 512, DType::kF32);
    }
  });
  const std::string want = "rank 0 called all_reduce(f32, 1024, sum) #7 but rank 1 called all_gather(f32, 512) #7";
  for (int r : {0, 1}) EXPECT_TRUE(contains(run.rank_errors[size_t(r)], want)) << run.rank_errors[size_t(r)];
  EXPECT_TRUE(contains(run.launch_error, want)) << run.launch_error;
}

TEST(ThreadsFailure, DebugModeReportsMismatchedCollectives) { expect_mismatch_message(true); }
TEST(ThreadsFailure, MismatchedCollectivesAreCaughtEvenWithoutDebug) { expect_mismatch_message(false); }

TEST(ThreadsFailure, MismatchedCountsAreAnErrorNotACrash) {
  const auto run = run_failing(3, test_comm_options(), [](Communicator& c) {
    std::vector<float> x(200000, 1.f);
    c.all_reduce(x.data(), x.data(), c.rank() == 1 ? 200000 : 100000, DType::kF32, ReduceOp::kSum);
  });
  EXPECT_TRUE(contains(run.launch_error, "rank 0 called all_reduce(f32, 100000, sum) #1 but rank 1 called "
                                         "all_reduce(f32, 200000, sum) #1"))
      << run.launch_error;
}

TEST(ThreadsFailure, AllToAllCountDisagreementNamesBothRanks) {
  const auto run = run_failing(2, test_comm_options(), [](Communicator& c) {
    std::vector<int64_t> in(10, 1), out(10, 0);
    const std::vector<int64_t> sends{2, 3};
    const std::vector<int64_t> recvs = c.rank() == 0 ? std::vector<int64_t>{2, 4} : std::vector<int64_t>{3, 3};
    c.all_to_all(in.data(), sends, out.data(), recvs, DType::kI64);
  });
  EXPECT_TRUE(contains(run.launch_error, "rank 1 sends 2 elements to rank 0 but rank 0 expects 4")) << run.launch_error;
}

TEST(ThreadsFailure, RecvOfTheWrongSizeNamesBothSides) {
  const auto run = run_failing(2, test_comm_options(), [](Communicator& c) {
    std::vector<float> x(100, 1.f);
    if (c.rank() == 0) c.send(x.data(), 50, DType::kF32, 1);
    else c.recv(x.data(), 100, DType::kF32, 0);
  });
  EXPECT_TRUE(contains(run.launch_error, "called recv(f32, 100) from rank 0 but rank 0 called send(f32, 50)"))
      << run.launch_error;
}

// Rank 0 stays in its function (a return would be reported instead) until rank 1 has timed out.
TEST(ThreadsFailure, RecvFromARankThatNeverSendsTimesOut) {
  const double timeout = 0.3;
  FailureCount failed;
  const auto run = run_failing(2, test_comm_options(timeout), [&](Communicator& c) {
    float x = 0;
    if (c.rank() == 0) {
      EXPECT_TRUE(failed.wait_for(1, patient_s())) << "rank 1 never timed out";
    } else {
      c.recv(&x, 1, DType::kF32, 0);
    }
  }, &failed);
  EXPECT_TRUE(contains(run.launch_error, "timed out after 0.3 s waiting for rank 0 in recv")) << run.launch_error;
  EXPECT_GE(run.rank_fail_s[1], timeout);
  EXPECT_TRUE(run.rank_errors[0].empty()) << run.rank_errors[0];
}

}  // namespace
}  // namespace tensorpar::testing

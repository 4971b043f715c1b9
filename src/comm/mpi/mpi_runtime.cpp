// MpiRuntime: MPI_Init_thread once per process, MPI_Finalize at exit, MPI_Abort when a
// collective failed (a job with a dead or stuck rank cannot recover, and finalising would hang).
#include "comm/mpi/mpi_runtime.h"

#include <mpi.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "comm/mpi/mpi_check.h"
#include "comm/mpi/mpi_failure_channel.h"

namespace tensorpar::mpi {

namespace {

[[noreturn]] void abort_job(int world_rank, const char* why) {
  std::fprintf(stderr, "tensorpar: aborting the MPI job from world rank %d: %s\n", world_rank, why);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);  // MPI_Abort does not return; this is for a broken MPI
}

}  // namespace

MpiRuntime& MpiRuntime::get() {
  // The one process-wide object of the backend: MPI itself is process-global state.
  static MpiRuntime runtime;
  return runtime;
}

MpiRuntime::MpiRuntime() {
  int init = 0;
  mpi_check(MPI_Initialized(&init), "mpi::init");
  if (init) {
    mpi_check(MPI_Query_thread(&thread_level_), "mpi::init");
  } else {
    mpi_check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &thread_level_), "mpi::init");
    owns_init_ = true;
    // Errors on the world (our communicators are made from it) come back as codes, not aborts.
    mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "mpi::init");
  }
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "mpi::init");
}

MpiRuntime::~MpiRuntime() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  if (failed()) {
    if (channel_) channel_->linger(grace_s_.load());
    abort_job(world_rank_, "a rank failed earlier (see the errors above); MPI_Finalize would hang");
  }
  if (!owns_init_) return;
  // Finalize synchronises with the other ranks; bound it like every other wait.
  const double t = finalize_timeout_s_.load();
  run_with_watchdog("MPI_Finalize", t > 0 ? t : 300, [] { MPI_Finalize(); });
}

void MpiRuntime::note_timeout(double timeout_s) {
  double cur = finalize_timeout_s_.load();
  while (timeout_s > cur && !finalize_timeout_s_.compare_exchange_weak(cur, timeout_s)) {
  }
}

FailureChannel* MpiRuntime::open_channel(double timeout_s) {
  if (channel_) return channel_.get();
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_SUCCESS;
  run_with_watchdog("[mpi] MPI_Comm_dup of the failure channel", timeout_s,
                    [&] { rc = MPI_Comm_dup(MPI_COMM_WORLD, &comm); });
  mpi_check(rc, "mpi failure channel");
  channel_ = std::make_unique<FailureChannel>(comm);
  return channel_.get();
}

void MpiRuntime::fail_job(const std::string& why, double grace_s, bool say) {
  if (failed_.exchange(true, std::memory_order_acq_rel)) return;  // the first failure is reported
  grace_s_.store(grace_s);
  if (say) {
    std::fprintf(stderr, "tensorpar: %s\n", why.c_str());
    std::fflush(stderr);
  }
  std::thread([why, grace_s, rank = world_rank_] {
    std::this_thread::sleep_for(std::chrono::duration<double>(grace_s));
    abort_job(rank, ("still running " + std::to_string(grace_s) + " s after: " + why).c_str());
  }).detach();
}

void MpiRuntime::run_with_watchdog(const std::string& what, double timeout_s,
                                   const std::function<void()>& fn) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread watchdog([&, rank = world_rank_] {
    std::unique_lock lock(mu);
    if (!cv.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return done; })) {
      abort_job(rank, (what + " blocked for more than " + std::to_string(timeout_s) +
                 " s: a peer died or stalled")
                    .c_str());
    }
  });
  try {
    fn();
  } catch (...) {
    {
      std::lock_guard lock(mu);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
    throw;
  }
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_one();
  watchdog.join();
}

}  // namespace tensorpar::mpi

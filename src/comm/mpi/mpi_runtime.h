// The MPI library's lifetime in this process: initialised once (MPI_Init_thread, asking for
// MPI_THREAD_MULTIPLE), finalised at exit; and the watchdog that ends a job which cannot
// recover (a collective timed out or failed: a peer died or stalled), with a clear message.
#pragma once

#include <atomic>
#include <functional>
#include <string>

namespace tensorpar::mpi {

class MpiRuntime {
 public:
  // The process's runtime, initialising MPI on first use. Finalises (or aborts the job, after a
  // failure) when the process exits.
  static MpiRuntime& get();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  ~MpiRuntime();

  int thread_level() const { return thread_level_; }
  // The longest CommOptions timeout any communicator uses; bounds MPI_Finalize at exit.
  void note_timeout(double timeout_s);
  bool failed() const { return failed_.load(std::memory_order_acquire); }

  // A collective failed and the job cannot recover: prints `why` once on stderr and arms a
  // watchdog that calls MPI_Abort after grace_s (the caller meanwhile gets an Error it may
  // report). Exiting the process earlier aborts the job at once, since MPI_Finalize could hang.
  void fail_job(const std::string& why, double grace_s);

  // Runs fn, a blocking MPI call with no nonblocking form (MPI_Comm_split, MPI_Finalize); if it
  // has not returned after timeout_s, prints what was stuck and aborts the job.
  void run_with_watchdog(const std::string& what, double timeout_s, const std::function<void()>& fn);

 private:
  MpiRuntime();
  int thread_level_ = 0;
  int world_rank_ = -1;
  bool owns_init_ = false;  // false when the application initialised MPI itself
  std::atomic<bool> failed_{false};
  std::atomic<double> finalize_timeout_s_{0};  // 0: no communicator yet
};

}  // namespace tensorpar::mpi

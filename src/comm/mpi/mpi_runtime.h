// The MPI library's lifetime in this process: initialised once (MPI_Init_thread, asking for
// MPI_THREAD_MULTIPLE), finalised at exit; and the watchdog that ends a job which cannot
// recover (a collective timed out or failed: a peer died or stalled), with a clear message.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>

namespace tensorpar::mpi {

class FailureChannel;

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

  // A collective failed and the job cannot recover: prints `why` once on stderr (unless !say) and
  // arms a watchdog that calls MPI_Abort after grace_s (the caller meanwhile gets an Error it may
  // report). Exiting the process earlier aborts the job, since MPI_Finalize could hang: first
  // waiting (up to grace_s) until the peers that can still answer are ready to go too, so that
  // each survivor has printed its own error (see mpi_failure_channel.h).
  void fail_job(const std::string& why, double grace_s, bool say = true);

  // The failure channel over the world (collective on first call: every rank makes it when it
  // creates its world communicator); null before.
  FailureChannel* open_channel(double timeout_s);
  FailureChannel* channel() const { return channel_.get(); }

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
  std::atomic<double> grace_s_{0};             // fail_job's grace: bounds the wait at exit
  std::unique_ptr<FailureChannel> channel_;
};

}  // namespace tensorpar::mpi

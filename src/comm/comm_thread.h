// CommThread: collectives issued now and completed in the background, so that communication
// overlaps the caller's compute (data-parallel gradient buckets reduced while backward goes on).
// A thread of its own runs the operations, in the order issued, on a communicator only it uses:
// a split of the caller's group made at construction, so they never interleave with the
// caller's own operations on the group. Works over every backend (threads, mpi with
// MPI_THREAD_MULTIPLE, nccl: each op sets its device), and keeps their guarantees: each
// operation has the backend's timeout, debug fingerprints and fault injection (the split of a
// FaultInjectingCommunicator is wrapped too), so wait() cannot block past the timeout of the
// operations before it. Its waits sleep between polls instead of spinning (core/threading.h):
// the thread shares the rank's cores with its compute.
//
// Every rank of the group must submit the same sequence of operations (as for blocking calls).
// The first operation that fails fails every later one at once (the group is broken), and
// wait() rethrows that failure on the caller's thread: an injected kill of a threads rank too,
// so the rank dies on its own thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "comm/communicator.h"

namespace tensorpar {

class CommThread {
 public:
  using Op = std::function<void(Communicator&)>;

  // Splits `group` (collective over it) and starts the thread.
  explicit CommThread(Communicator& group);
  // Operations not yet started are dropped (the caller is unwinding on an error, or waited for
  // all); the one running ends or fails within its timeout, then the thread is joined.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `op`, run on the thread with the dedicated communicator; returns its ticket, 1, 2, ...
  // in submission order. Whatever op reads and writes must stay alive and untouched by the
  // caller until wait() says it is done.
  int64_t submit(Op op);
  // Returns when operation `ticket` and every one before it are done; rethrows the failure of
  // the first one that failed, if any did.
  void wait(int64_t ticket);
  // wait() for every operation submitted so far.
  void wait_all();
  // The dedicated group's size and this rank in it (the caller's group's).
  int size() const { return size_; }
  int rank() const { return rank_; }

 private:
  void run();

  std::unique_ptr<Communicator> comm_;
  int size_ = 1, rank_ = 0;
  mutable std::mutex mu_;
  std::condition_variable work_, done_;
  std::deque<Op> queue_;
  int64_t submitted_ = 0, finished_ = 0;  // tickets issued; tickets done (ran or failed)
  std::exception_ptr failure_;             // the first operation's failure
  bool stop_ = false;
  std::thread thread_;  // last: started when everything above exists
};

// One operation queued on a CommThread by start() and waited for by finish(), which rethrows its
// failure; the owner computes in between. If the owner unwinds before finish(), the destructor
// still waits (the failure already propagating wins), so whatever the operation touches
// outlives it.
class QueuedOp {
 public:
  QueuedOp(CommThread& thread, CommThread::Op op) : thread_(thread), op_(std::move(op)) {}
  ~QueuedOp();
  QueuedOp(const QueuedOp&) = delete;
  QueuedOp& operator=(const QueuedOp&) = delete;
  void start();
  void finish();
  bool started() const { return ticket_ != 0 || done_; }

 private:
  CommThread& thread_;
  CommThread::Op op_;
  int64_t ticket_ = 0;  // 0: not queued, or waited for
  bool done_ = false;
};

}  // namespace tensorpar

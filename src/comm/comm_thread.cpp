// CommThread (see comm_thread.h): a queue of operations under one mutex, a worker that pops
// and runs them with the lock released, and condition variables for new work and for done.
#include "comm/comm_thread.h"

#include "core/error.h"
#include "core/threading.h"

namespace tensorpar {

CommThread::CommThread(Communicator& group) : comm_(group.split(0, group.rank())) {
  TP_CHECK(comm_, "[CommThread] splitting ", group.name(), " gave no group");
  size_ = comm_->size();
  rank_ = comm_->rank();
  thread_ = std::thread([this] { run(); });
}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    finished_ += int64_t(queue_.size());
    queue_.clear();
  }
  work_.notify_all();
  thread_.join();
}

int64_t CommThread::submit(Op op) {
  int64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(op));
    ticket = ++submitted_;
  }
  work_.notify_one();
  return ticket;
}

void CommThread::wait(int64_t ticket) {
  std::unique_lock<std::mutex> lock(mu_);
  TP_CHECK(ticket >= 0 && ticket <= submitted_, "[CommThread] wait for ticket ", ticket, ": only ", submitted_,
           " operations were submitted");
  done_.wait(lock, [&] { return finished_ >= ticket; });
  if (failure_) std::rethrow_exception(failure_);
}

void CommThread::wait_all() {
  int64_t last = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    last = submitted_;
  }
  wait(last);
}

void CommThread::run() {
  set_sleeping_comm_waits(true);  // this thread's core is the rank's compute's too
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping
    Op op = std::move(queue_.front());
    queue_.pop_front();
    const bool broken = bool(failure_);
    lock.unlock();
    std::exception_ptr error;
    if (!broken) {
      // Any throw, an injected kill (not a std::exception) included, goes to the waiter.
      try {
        op(*comm_);
      } catch (...) {
        error = std::current_exception();
      }
    }
    lock.lock();
    if (error && !failure_) failure_ = error;
    ++finished_;
    done_.notify_all();
  }
}

void QueuedOp::start() {
  TP_CHECK(!started(), "[QueuedOp::start] started twice");
  ticket_ = thread_.submit(op_);
}

void QueuedOp::finish() {
  const int64_t t = ticket_;
  ticket_ = 0;
  done_ = true;
  if (t != 0) thread_.wait(t);
}

QueuedOp::~QueuedOp() {
  if (ticket_ == 0) return;
  try {
    thread_.wait(ticket_);
  } catch (...) {  // unwinding already: the first error is the one that propagates
  }
}

}  // namespace tensorpar

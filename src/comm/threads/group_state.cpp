// Generation flags with spin-then-futex waits, timeouts and abort propagation for the threads
// backend. A waiter spins briefly (ranks usually arrive within microseconds), then sleeps on the
// peer's flag word in short slices so it also notices aborts, exits and its deadline; a thread
// set to sleeping waits (core/threading.h) sleeps at once.
#include "comm/threads/group_state.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <sched.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cmath>
#include <ctime>

#include <sstream>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/error.h"
#include "core/threading.h"

namespace tensorpar::threads {

namespace {

// The longest single sleep: bounds how late a sleeper notices an abort it was not woken for.
constexpr double kSleepSliceS = 0.005;

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

inline bool reached(uint32_t v, uint32_t gen) { return int32_t(v - gen) >= 0; }

void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, double seconds) {
  timespec ts;
  ts.tv_sec = time_t(seconds);
  ts.tv_nsec = long((seconds - double(ts.tv_sec)) * 1e9);
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
}

void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

std::string seconds_str(double s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

}  // namespace

AbortState::AbortState(int n_world) : n_world_(n_world), exited_(new std::atomic<bool>[size_t(n_world)]) {
  for (int r = 0; r < n_world; ++r) exited_[size_t(r)].store(false);
}

void AbortState::abort(int world_rank, const std::string& reason) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (reason_.empty()) reason_ = "rank " + std::to_string(world_rank) + " " + reason;
  }
  aborted_.store(true, std::memory_order_release);
}

std::string AbortState::reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reason_;
}

GroupState::GroupState(std::shared_ptr<AbortState> abort, std::vector<int> world_ranks,
                       std::string name, const CommOptions& options, int spin_iters)
    : n_(int(world_ranks.size())),
      world_ranks_(std::move(world_ranks)),
      name_(std::move(name)),
      options_(options),
      spin_iters_(spin_iters),
      abort_(std::move(abort)),
      flags_(new RankFlag[size_t(n_)]),
      slots_(new RankSlot[size_t(n_)]),
      staging_(new (std::align_val_t{64}) std::byte[size_t(n_) * 2 * size_t(kStagingBytes)]),
      mailboxes_(new Mailbox[size_t(n_) * size_t(n_)]) {}

void GroupState::arrive(int r, uint32_t gen) {
  RankFlag& f = flags_[size_t(r)];
  // seq_cst on both sides (store here, sleepers++ then load in wait_for): either the sleeper
  // sees the new generation or this load sees the sleeper and wakes it.
  f.gen.store(gen, std::memory_order_seq_cst);
  if (f.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&f.gen);
}

void GroupState::wait_for(int peer, uint32_t gen, const WaitContext& ctx, bool drain) {
  RankFlag& f = flags_[size_t(peer)];
  const bool sleep_at_once = sleeping_comm_waits();
  for (int i = 0; i < (sleep_at_once ? 0 : spin_iters_); ++i) {
    if (reached(f.gen.load(std::memory_order_acquire), gen)) return;
    cpu_relax();
  }
  const auto start = std::chrono::steady_clock::now();
  const double timeout = options_.timeout_s;
  for (int yields = sleep_at_once ? 16 : 0;; ++yields) {
    if (reached(f.gen.load(std::memory_order_acquire), gen)) return;
    if (!drain && abort_->aborted()) fail_aborted(ctx);
    if (!drain && abort_->exited(world_rank(peer))) {
      // The exit flag is released after the peer's last arrive: re-read before concluding.
      if (reached(f.gen.load(std::memory_order_acquire), gen)) return;
      fail_exited(peer, ctx);
    }
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited >= timeout) fail_timeout(peer, ctx);
    if (yields < 16) {  // oversubscribed ranks: let the one we wait for run
      sched_yield();
      continue;
    }
    f.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = f.gen.load(std::memory_order_seq_cst);
    if (!reached(v, gen)) futex_wait(&f.gen, v, std::min(kSleepSliceS, timeout - waited));
    f.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

int GroupState::laggard(int r, uint32_t gen) const {
  for (int i = 1; i < n_; ++i) {
    const int p = (r + i) % n_;
    if (!reached(flags_[size_t(p)].gen.load(std::memory_order_acquire), gen)) return p;
  }
  return -1;
}

void GroupState::commit_sync(int r, uint32_t gen, uint32_t k, const WaitContext& ctx) {
  arrive(r, gen);
  const uint32_t target = k * uint32_t(n_);
  std::atomic<uint32_t>& count = commits_.gen;
  if (count.fetch_add(1, std::memory_order_seq_cst) + 1 == target) {
    if (commits_.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&count);
    return;
  }
  for (int i = 0; i < spin_iters_; ++i) {
    if (reached(count.load(std::memory_order_acquire), target)) return;
    cpu_relax();
  }
  const auto start = std::chrono::steady_clock::now();
  for (int yields = 0;; ++yields) {
    if (reached(count.load(std::memory_order_acquire), target)) return;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const int late = laggard(r, gen);
    const bool gone = late >= 0 && abort_->exited(world_rank(late));
    if (abort_->aborted() || gone || waited >= options_.timeout_s) {
      // Withdraw unless the sync completed: then peers may be reading our buffers, so finish.
      uint32_t v = count.load(std::memory_order_seq_cst);
      while (!reached(v, target)) {
        if (count.compare_exchange_weak(v, v - 1, std::memory_order_seq_cst)) {
          if (abort_->aborted()) fail_aborted(ctx);
          if (gone) fail_exited(late, ctx);
          fail_timeout(late >= 0 ? late : r, ctx);
        }
      }
      return;
    }
    if (yields < 16) {
      sched_yield();
      continue;
    }
    commits_.sleepers.fetch_add(1, std::memory_order_seq_cst);
    const uint32_t v = count.load(std::memory_order_seq_cst);
    if (!reached(v, target)) futex_wait(&count, v, std::min(kSleepSliceS, options_.timeout_s - waited));
    commits_.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

void GroupState::throw_if_aborted(const WaitContext& ctx) const {
  if (abort_->aborted()) fail_aborted(ctx);
}

Message GroupState::receive(int src, int dst, const WaitContext& ctx) {
  Mailbox& box = mailbox(src, dst);
  const auto start = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(box.mutex);
  for (;;) {
    if (!box.queue.empty()) {
      Message m = std::move(box.queue.front());
      box.queue.pop_front();
      return m;
    }
    if (abort_->aborted()) fail_aborted(ctx);
    if (abort_->exited(world_rank(src))) fail_exited(src, ctx);  // sends happen under the lock
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited >= options_.timeout_s) {
      lock.unlock();
      fail_timeout(src, ctx);
    }
    box.ready.wait_for(lock, std::chrono::duration<double>(std::min(kSleepSliceS, options_.timeout_s - waited)));
  }
}

void GroupState::fail_aborted(const WaitContext& ctx) const {
  TP_CHECK(false, "[", comm_op_name(ctx.op), "] ", comm_op_name(ctx.op), " #", ctx.seq, " on ", name_,
           " (rank ", ctx.rank, ") aborted: ", abort_->reason());
  std::abort();
}

void GroupState::fail_exited(int peer, const WaitContext& ctx) const {
  const std::string why = "rank " + std::to_string(peer) + " of " + name_ +
                          " exited (its function returned, or the rank died) without reaching " +
                          std::string(comm_op_name(ctx.op)) + " #" + std::to_string(ctx.seq);
  abort_->abort(world_rank(ctx.rank), "saw: " + why);
  TP_CHECK(false, "[", comm_op_name(ctx.op), "] ", why, " (rank ", ctx.rank, " waiting)");
  std::abort();
}

void GroupState::fail_timeout(int peer, const WaitContext& ctx) const {
  const std::string why = "timed out after " + seconds_str(options_.timeout_s) + " s waiting for rank " +
                          std::to_string(peer) + " in " + std::string(comm_op_name(ctx.op)) + " #" +
                          std::to_string(ctx.seq) + " on " + name_;
  abort_->abort(world_rank(ctx.rank), why);
  TP_CHECK(false, "[", comm_op_name(ctx.op), "] rank ", ctx.rank, " ", why);
  std::abort();
}

}  // namespace tensorpar::threads

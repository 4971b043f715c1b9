// Shared state of the threads backend: the world's abort flag (shared with every group split
// from it), and per group the ranks' generation flags, the descriptors they publish for each
// collective, their staging buffers and the send/recv mailboxes. Waits spin, then sleep on a
// futex; each has a timeout and fails at once when the group is aborted or the peer has exited.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "comm/debug_fingerprint.h"

namespace tensorpar::threads {

// Failure state of a world: set once by the first rank that fails, seen by every group.
class AbortState {
 public:
  explicit AbortState(int n_world);
  int n_world() const { return n_world_; }
  bool aborted() const { return aborted_.load(std::memory_order_acquire); }
  // Records `reason` (the first call wins) and raises the flag.
  void abort(int world_rank, const std::string& reason);
  std::string reason() const;
  // World rank `r`'s function has returned: waits on it can never succeed any more.
  void mark_exited(int world_rank) { exited_[size_t(world_rank)].store(true, std::memory_order_release); }
  bool exited(int world_rank) const { return exited_[size_t(world_rank)].load(std::memory_order_acquire); }

 private:
  std::atomic<bool> aborted_{false};
  mutable std::mutex mutex_;
  std::string reason_;
  int n_world_;
  std::unique_ptr<std::atomic<bool>[]> exited_;
};

// One rank's barrier generation, alone on its cache line; a futex word for sleepers.
struct alignas(64) RankFlag {
  std::atomic<uint32_t> gen{0};
  std::atomic<uint32_t> sleepers{0};
};

class GroupState;

// What a rank publishes for one collective. Double-buffered by the op's parity: a rank may
// publish op k+1 while slower peers still read its op k.
struct OpDesc {
  OpFingerprint fp;
  const void* in = nullptr;
  void* out = nullptr;
  const int64_t* send_counts = nullptr;  // all_to_all
  const int64_t* recv_counts = nullptr;
  int color = 0, key = 0;                // split
  std::shared_ptr<GroupState> new_group;  // split: published by each new group's leader
};

struct alignas(64) RankSlot {
  OpDesc desc[2];
};

// A buffered point-to-point message (send returns once it is queued, as an MPI eager send).
struct Message {
  DType dtype;
  int64_t count;
  std::unique_ptr<std::byte[]> data;
};
struct Mailbox {
  std::mutex mutex;
  std::condition_variable ready;
  std::deque<Message> queue;
};

struct WaitContext {
  CommOp op;
  uint64_t seq;
  int rank;  // the waiting rank (group rank)
};

struct AlignedDelete {
  void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{64}); }
};

class GroupState {
 public:
  // Bytes of staging per rank and parity: messages up to this size take the one-barrier path.
  static constexpr int64_t kStagingBytes = 64 * 1024;
  // all_reduce messages up to this size use the one-shot path (measured on a 2-core EPYC VM).
  static constexpr int64_t kOneShotBytes = 2 * 1024;
  // all_reduce messages from this size write their outputs with non-temporal stores.
  static constexpr int64_t kStreamBytes = 8 * 1024 * 1024;

  GroupState(std::shared_ptr<AbortState> abort, std::vector<int> world_ranks, std::string name,
             const CommOptions& options, int spin_iters);
  int size() const { return n_; }
  const std::string& name() const { return name_; }
  int world_rank(int r) const { return world_ranks_[size_t(r)]; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }
  const CommOptions& options() const { return options_; }
  int spin_iters() const { return spin_iters_; }
  const std::shared_ptr<AbortState>& abort_state() const { return abort_; }

  RankFlag& flag(int r) { return flags_[size_t(r)]; }
  OpDesc& desc(int r, int parity) { return slots_[size_t(r)].desc[parity]; }
  std::byte* staging(int r, int parity) {
    return staging_.get() + (size_t(r) * 2 + size_t(parity)) * size_t(kStagingBytes);
  }
  Mailbox& mailbox(int src, int dst) { return mailboxes_[size_t(src) * size_t(n_) + size_t(dst)]; }

  // Publishes generation `gen` for rank `r` and wakes its sleepers.
  void arrive(int r, uint32_t gen);
  // Waits until rank `peer` reached generation `gen`; throws Error on timeout (after aborting
  // the world), on abort, or when the peer has exited without reaching it. With `drain` only the
  // timeout ends the wait: used at the end of a direct op, where peers still read this rank's
  // buffers and are sure to arrive, so this rank must not unwind (and free them) on an abort.
  void wait_for(int peer, uint32_t gen, const WaitContext& ctx, bool drain = false);
  // The entry sync of an op whose peers then read this rank's own buffers: all n ranks arrive on
  // one counter (this is commit number `k` of the group), and a rank that gives up (abort, a peer
  // exited, timeout) withdraws its arrival first, unless everyone had arrived, in which case it
  // returns normally and finishes the op. So no peer can ever read the buffers of a rank that
  // has unwound. `gen` is also published on the rank's flag, for blame and plain syncs.
  void commit_sync(int r, uint32_t gen, uint32_t k, const WaitContext& ctx);
  // Throws if the world was aborted (checked on entry to every op).
  void throw_if_aborted(const WaitContext& ctx) const;
  // Mailbox receive with the same failure rules; returns the oldest message from `src`.
  Message receive(int src, int dst, const WaitContext& ctx);

 private:
  [[noreturn]] void fail_aborted(const WaitContext& ctx) const;
  [[noreturn]] void fail_exited(int peer, const WaitContext& ctx) const;
  [[noreturn]] void fail_timeout(int peer, const WaitContext& ctx) const;
  // The first rank (after r) that has not reached `gen`, or -1.
  int laggard(int r, uint32_t gen) const;

  const int n_;
  std::vector<int> world_ranks_;  // group rank -> world rank
  std::string name_;
  CommOptions options_;
  int spin_iters_;
  std::shared_ptr<AbortState> abort_;
  std::unique_ptr<RankFlag[]> flags_;
  RankFlag commits_;  // gen = arrivals at commit syncs so far (k * n once commit k is complete)
  std::unique_ptr<RankSlot[]> slots_;
  std::unique_ptr<std::byte[], AlignedDelete> staging_;
  std::unique_ptr<Mailbox[]> mailboxes_;
};

}  // namespace tensorpar::threads

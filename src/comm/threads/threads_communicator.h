// The Communicator of one rank of a threads group. Small messages take a one-barrier path through
// per-rank staging buffers; large ones work directly on the ranks' published buffers (each rank
// reduces its slice of every input and writes it into every output: 2nN bytes of traffic).
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/threads/group_state.h"

namespace tensorpar::threads {

class ThreadsCommunicator final : public Communicator {
 public:
  ThreadsCommunicator(std::shared_ptr<GroupState> group, int rank);

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string name() const override { return group_->name(); }

  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override;
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void broadcast(void* data, int64_t count, DType dtype, int root) override;
  void all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                  std::span<const int64_t> recv_counts, DType dtype) override;
  void send(const void* data, int64_t count, DType dtype, int peer) override;
  void recv(void* data, int64_t count, DType dtype, int peer) override;
  void barrier() override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  using Communicator::all_reduce;
  using Communicator::broadcast;

  GroupState& group() { return *group_; }
  int world_rank() const { return group_->world_rank(rank_); }

 private:
  // Starts collective number seq_+1: abort check, debug fingerprint check, then this rank's
  // descriptor for the op's phase (fingerprint filled in, pointers cleared).
  OpDesc& begin(CommOp op, DType dtype, int64_t count, ReduceOp reduce, int64_t root);
  // Every rank arrives; returns when all have. An op's last sync after peers read this rank's
  // own buffers is a `drain` (see GroupState::wait_for).
  void sync(bool drain = false);
  // The entry sync of a direct op (peers will read this rank's buffers): GroupState::commit_sync.
  void commit_sync();
  // Throws (on every rank alike) if the ranks' published fingerprints differ.
  void check_descs();
  // Staged all-gather of `bytes` (<= staging) without fingerprints: the debug check's transport.
  void raw_gather(const void* in, void* out, int64_t bytes);
  OpDesc& peer_desc(int r) { return group_->desc(r, parity_); }

  std::shared_ptr<GroupState> group_;
  int rank_;
  uint64_t seq_ = 0;    // collectives issued (fingerprint numbering)
  uint64_t phase_ = 0;  // descriptor/staging uses; parity_ is the current one's buffer
  int parity_ = 0;
  uint32_t gen_ = 0;    // barrier generation reached by this rank
  uint32_t commits_ = 0;  // commit syncs done on this group
  WaitContext ctx_{CommOp::kBarrier, 0, 0};
};

}  // namespace tensorpar::threads

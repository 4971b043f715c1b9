// A Communicator that forwards every call to another and adds up the wall time spent inside
// collectives: what a server reports as each rank's time in communication versus compute.
// One rank's thread uses it (like every Communicator); reading seconds() is that thread's too.
#pragma once

#include <memory>

#include "comm/communicator.h"

namespace tensorpar {

class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(Communicator& inner) : inner_(inner) {}
  // Seconds spent in collectives and point-to-point calls so far.
  double seconds() const { return seconds_; }

  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  std::string name() const override { return inner_.name(); }
  void all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void all_gather(const void* in, void* out, int64_t count, DType dtype) override;
  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) override;
  void broadcast(void* data, int64_t count, DType dtype, int root) override;
  void all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                  std::span<const int64_t> recv_counts, DType dtype) override;
  void send(const void* data, int64_t count, DType dtype, int peer) override;
  void recv(void* data, int64_t count, DType dtype, int peer) override;
  void barrier() override;
  // The new group is the inner backend's own (not timed).
  std::unique_ptr<Communicator> split(int color, int key) override { return inner_.split(color, key); }

  using Communicator::all_reduce;
  using Communicator::broadcast;

 private:
  template <typename F>
  void timed(F&& f);
  Communicator& inner_;
  double seconds_ = 0;
};

}  // namespace tensorpar

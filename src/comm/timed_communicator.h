// A Communicator that forwards every call to another and adds up the wall time spent inside
// collectives: what a server reports as each rank's time in communication versus compute, and a
// training run's metrics. Groups split from it are timed too and add to the same total.
// One thread calls each communicator (as for every Communicator), but a group split from it may
// belong to another thread of the rank (a CommThread's): the shared total is atomic.
#pragma once

#include <atomic>
#include <memory>

#include "comm/communicator.h"

namespace tensorpar {

class TimedCommunicator final : public Communicator {
 public:
  explicit TimedCommunicator(Communicator& inner)
      : inner_(inner), seconds_(std::make_shared<std::atomic<double>>(0.0)) {}
  // Seconds spent in collectives and point-to-point calls so far, in this group and every group
  // split from it.
  double seconds() const { return seconds_->load(std::memory_order_relaxed); }

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
  // The inner backend's new group, timed into this one's total.
  std::unique_ptr<Communicator> split(int color, int key) override;

  using Communicator::all_reduce;
  using Communicator::broadcast;

 private:
  TimedCommunicator(std::unique_ptr<Communicator> owned, std::shared_ptr<std::atomic<double>> seconds)
      : owned_(std::move(owned)), inner_(*owned_), seconds_(std::move(seconds)) {}
  template <typename F>
  void timed(F&& f);
  std::unique_ptr<Communicator> owned_;  // a split group's backend
  Communicator& inner_;
  std::shared_ptr<std::atomic<double>> seconds_;  // shared with the groups split from this one
};

}  // namespace tensorpar

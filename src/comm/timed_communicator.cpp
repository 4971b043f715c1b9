// TimedCommunicator (see timed_communicator.h): a steady clock read before and after each call.
#include "comm/timed_communicator.h"

#include <chrono>

namespace tensorpar {

template <typename F>
void TimedCommunicator::timed(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Add {  // counted also when the call throws
    std::atomic<double>& s;
    std::chrono::steady_clock::time_point t0;
    ~Add() {
      s.fetch_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
                  std::memory_order_relaxed);
    }
  } add{*seconds_, t0};
  f();
}

void TimedCommunicator::all_reduce(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) {
  timed([&] { inner_.all_reduce(in, out, count, dtype, op); });
}
void TimedCommunicator::all_gather(const void* in, void* out, int64_t count, DType dtype) {
  timed([&] { inner_.all_gather(in, out, count, dtype); });
}
void TimedCommunicator::reduce_scatter(const void* in, void* out, int64_t count, DType dtype, ReduceOp op) {
  timed([&] { inner_.reduce_scatter(in, out, count, dtype, op); });
}
void TimedCommunicator::broadcast(void* data, int64_t count, DType dtype, int root) {
  timed([&] { inner_.broadcast(data, count, dtype, root); });
}
void TimedCommunicator::all_to_all(const void* in, std::span<const int64_t> send_counts, void* out,
                                   std::span<const int64_t> recv_counts, DType dtype) {
  timed([&] { inner_.all_to_all(in, send_counts, out, recv_counts, dtype); });
}
void TimedCommunicator::send(const void* data, int64_t count, DType dtype, int peer) {
  timed([&] { inner_.send(data, count, dtype, peer); });
}
void TimedCommunicator::recv(void* data, int64_t count, DType dtype, int peer) {
  timed([&] { inner_.recv(data, count, dtype, peer); });
}
void TimedCommunicator::barrier() {
  timed([&] { inner_.barrier(); });
}
std::unique_ptr<Communicator> TimedCommunicator::split(int color, int key) {
  std::unique_ptr<Communicator> group;
  timed([&] { group = inner_.split(color, key); });
  return std::unique_ptr<Communicator>(new TimedCommunicator(std::move(group), seconds_));
}

}  // namespace tensorpar

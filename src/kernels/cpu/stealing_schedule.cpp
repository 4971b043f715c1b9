#include "kernels/cpu/stealing_schedule.h"

#include <algorithm>

#include "core/error.h"

namespace tensorpar {

namespace {

constexpr int kShift = 32;
constexpr uint64_t kLow = (uint64_t(1) << kShift) - 1;

uint64_t pack(int64_t front, int64_t back) { return uint64_t(front) << kShift | uint64_t(back); }

}  // namespace

StealingSchedule::StealingSchedule(int64_t units, bool parallel, int64_t min_chunk)
    : n_(parallel ? std::max(1, omp_get_max_threads()) : 1),
      min_chunk_(std::max<int64_t>(1, min_chunk)),
      shares_(new Share[static_cast<size_t>(n_)]) {
  TP_CHECK(units >= 0 && units <= int64_t(kLow >> 1), "[StealingSchedule] ", units,
           " work units: expected 0 to 2^31 - 1");
  for (int s = 0; s < n_; ++s)
    shares_[s].bounds.store(pack(units * s / n_, units * (s + 1) / n_), std::memory_order_relaxed);
}

// The owner takes an eighth of what is left (at least min_chunk): large claims while the share is
// long, small ones near its end, where a thief may be waiting for the rest.
bool StealingSchedule::claim_front(int s, int64_t& b, int64_t& e) {
  std::atomic<uint64_t>& bounds = shares_[s].bounds;
  uint64_t cur = bounds.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t front = int64_t(cur >> kShift), back = int64_t(cur & kLow);
    if (front >= back) return false;
    const int64_t c = std::min(back - front, std::max(min_chunk_, (back - front) / 8));
    if (bounds.compare_exchange_weak(cur, pack(front + c, back), std::memory_order_relaxed)) {
      b = front, e = front + c;
      return true;
    }
  }
}

// A thief takes half of what is left, from the back, so the owner's stream stays contiguous.
bool StealingSchedule::claim_back(int s, int64_t& b, int64_t& e) {
  std::atomic<uint64_t>& bounds = shares_[s].bounds;
  uint64_t cur = bounds.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t front = int64_t(cur >> kShift), back = int64_t(cur & kLow);
    if (front >= back) return false;
    const int64_t c = std::min(back - front, std::max(min_chunk_, (back - front) / 2));
    if (bounds.compare_exchange_weak(cur, pack(front, back - c), std::memory_order_relaxed)) {
      b = back - c, e = back;
      return true;
    }
  }
}

}  // namespace tensorpar

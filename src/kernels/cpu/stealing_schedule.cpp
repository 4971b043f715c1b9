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

// The owner takes an eighth of what is left from the front (large claims while the share is
// long, small ones near its end, where a thief may be waiting for the rest); a thief takes half of
// what is left from the back, so the owner's stream stays contiguous.
bool StealingSchedule::claim(int s, End end, int64_t& b, int64_t& e) {
  std::atomic<uint64_t>& bounds = shares_[s].bounds;
  uint64_t cur = bounds.load(std::memory_order_relaxed);
  for (;;) {
    const int64_t front = int64_t(cur >> kShift), back = int64_t(cur & kLow), left = back - front;
    if (left <= 0) return false;
    const int64_t c = std::min(left, std::max(min_chunk_, left / (end == End::kFront ? 8 : 2)));
    const uint64_t next = end == End::kFront ? pack(front + c, back) : pack(front, back - c);
    if (bounds.compare_exchange_weak(cur, next, std::memory_order_relaxed)) {
      b = end == End::kFront ? front : back - c, e = b + c;
      return true;
    }
  }
}

}  // namespace tensorpar

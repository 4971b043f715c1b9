// A static schedule whose unfinished tail is shared. Each thread of a parallel region walks its
// own contiguous share of the work units front to back (one memory stream per thread, as
// `schedule(static)` gives), and a thread that runs out takes chunks from the back of the shares
// still unfinished. A thread that starts late, or loses its core for a while, then delays the
// region by a chunk instead of by its whole share: in a decode step of ~150 short regions the
// other threads otherwise wait at every region's end for the slowest one.
//
// Which thread computes a unit never changes what the unit computes: the kernels that use this
// give every output the same instructions whatever thread runs it, so results stay bitwise
// independent of the schedule.
//
// Use: construct before the region, then every thread of the region calls for_each():
//   StealingSchedule s(units, parallel);
//   parallel_if(parallel, [&] { s.for_each([&](int64_t unit) { ... }); });
// The team may be smaller than threads() (a nested region runs on one thread): shares whose
// owner is absent are taken whole by the others, so every unit still runs exactly once.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include <omp.h>

namespace tensorpar {

class StealingSchedule {
 public:
  // `units` work units (at most 2^31) over threads() shares; one share when !parallel.
  // A claim takes at least `min_chunk` units (the last of a share may be fewer).
  StealingSchedule(int64_t units, bool parallel, int64_t min_chunk = 1);

  int threads() const { return n_; }

  // By each thread of the region: fn(unit) for the units it claims, in order within a claim.
  // Over all threads every unit of [0, units) runs once.
  template <class F>
  void for_each(F&& fn) {
    const int t = omp_get_thread_num();
    int64_t b = 0, e = 0;
    if (t < n_)
      while (claim(t, End::kFront, b, e))
        for (int64_t i = b; i < e; ++i) fn(i);
    // Own share done: the others' tails, from the back, each until it is empty.
    for (int s = 0; s < n_; ++s) {
      const int v = (t + 1 + s) % n_;
      if (v == t) continue;
      while (claim(v, End::kBack, b, e))
        for (int64_t i = b; i < e; ++i) fn(i);
    }
  }

 private:
  // A share's unclaimed units [front, back), packed so one compare-and-swap moves either end.
  struct alignas(64) Share {
    std::atomic<uint64_t> bounds{0};
  };

  enum class End { kFront, kBack };  // the owner's end of a share, or a thief's
  // Claims [b, e) from share s's given end; false once the share is empty.
  bool claim(int s, End end, int64_t& b, int64_t& e);

  int n_ = 1;
  int64_t min_chunk_ = 1;
  std::unique_ptr<Share[]> shares_;
};

}  // namespace tensorpar

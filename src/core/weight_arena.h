// Inference weights packed side by side in huge pages. A decode step streams every weight once;
// with 4 KiB pages the hardware prefetchers stop at each page boundary that misses the TLB. Buffers
// from 4 MiB up already get transparent huge pages (buffer_cache.h), but a small model's matrices
// (a 576-wide model: 0.07-0.55 MB each) come from the heap in 4 KiB pages. While a WeightArena
// lives on a thread, that thread's allocations of kArenaMinBytes up to the huge-page threshold are
// carved one after another from 2 MiB-aligned mappings advised to use huge pages (chunks of
// kArenaChunkBytes), in the order the model packs them, which is the order a step reads them.
// Nothing carved is ever reused: a chunk is unmapped when the last buffer carved from it is
// released. So only allocations that live as long as the model belong under one (the packed
// weights), not temporaries.
#pragma once

#include <cstddef>
#include <memory>

namespace tensorpar {

constexpr size_t kArenaMinBytes = size_t(16) << 10;
constexpr size_t kArenaChunkBytes = size_t(32) << 20;

// Per thread, nestable (the innermost scope's chunk is used).
class WeightArena {
 public:
  WeightArena();
  ~WeightArena();
  WeightArena(const WeightArena&) = delete;
  WeightArena& operator=(const WeightArena&) = delete;

 private:
  WeightArena* outer_;
  std::shared_ptr<char> chunk_;  // the mapping being carved
  size_t used_ = 0, size_ = 0;
  friend std::shared_ptr<void> weight_arena_alloc(size_t n);
};

// n bytes (64-byte aligned, zero: fresh memory) from this thread's innermost WeightArena, or
// nullptr when there is none, n is outside [kArenaMinBytes, 4 MiB), or under AddressSanitizer
// (which must see every buffer's own bounds). Throws Error when the mapping fails.
std::shared_ptr<void> weight_arena_alloc(size_t n);

}  // namespace tensorpar

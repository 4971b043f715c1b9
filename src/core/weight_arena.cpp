// WeightArena (see weight_arena.h).
#include "core/weight_arena.h"

#include <sys/mman.h>

#include "core/buffer_cache.h"
#include "core/error.h"

namespace tensorpar {
namespace {

// Under AddressSanitizer buffers carved side by side would hide an overflow from one into the
// next: every buffer keeps its own allocation there.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kArenaOn = false;
#else
constexpr bool kArenaOn = true;
#endif

thread_local WeightArena* innermost = nullptr;

std::shared_ptr<char> map_chunk(size_t bytes) {
  char* p = static_cast<char*>(map_huge_page_aligned(bytes));
  TP_CHECK(p != nullptr, "[WeightArena] cannot map ", bytes >> 20, " MiB for weights");
  return std::shared_ptr<char>(p, [bytes](char* q) { munmap(q, bytes); });
}

}  // namespace

WeightArena::WeightArena() : outer_(innermost) { innermost = this; }
WeightArena::~WeightArena() { innermost = outer_; }

std::shared_ptr<void> weight_arena_alloc(size_t n) {
  WeightArena* a = innermost;
  if (!kArenaOn || !a || n < kArenaMinBytes || n >= kHugePageFrom) return nullptr;
  n = (n + 63) / 64 * 64;
  if (a->used_ + n > a->size_) {
    a->size_ = kArenaChunkBytes;
    a->chunk_ = map_chunk(a->size_);
    a->used_ = 0;
  }
  char* p = a->chunk_.get() + a->used_;
  a->used_ += n;
  return std::shared_ptr<void>(a->chunk_, p);  // the chunk lives while any of its buffers does
}

}  // namespace tensorpar

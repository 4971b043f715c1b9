// WeightArena (see weight_arena.h).
#include "core/weight_arena.h"

#include <sys/mman.h>

#include <cstdint>

#include "core/error.h"

namespace tensorpar {
namespace {

constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kArenaMaxBytes = size_t(4) << 20;  // from here up: buffer_cache's own huge pages
// Under AddressSanitizer buffers carved side by side would hide an overflow from one into the
// next: every buffer keeps its own allocation there.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kArenaOn = false;
#else
constexpr bool kArenaOn = true;
#endif

thread_local WeightArena* innermost = nullptr;

// A 2 MiB-aligned mapping of `bytes` (a multiple of 2 MiB), advised to use huge pages.
std::shared_ptr<char> map_chunk(size_t bytes) {
  const size_t span = bytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  TP_CHECK(raw != MAP_FAILED, "[WeightArena] cannot map ", bytes >> 20, " MiB for weights");
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) munmap(raw, aligned - begin);
  if (const size_t tail = begin + span - (aligned + bytes); tail > 0)
    munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  char* p = reinterpret_cast<char*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only: a kernel without THP ignores it
  return std::shared_ptr<char>(p, [bytes](char* q) { munmap(q, bytes); });
}

}  // namespace

WeightArena::WeightArena() : outer_(innermost) { innermost = this; }
WeightArena::~WeightArena() { innermost = outer_; }

std::shared_ptr<void> weight_arena_alloc(size_t n) {
  WeightArena* a = innermost;
  if (!kArenaOn || !a || n < kArenaMinBytes || n >= kArenaMaxBytes) return nullptr;
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

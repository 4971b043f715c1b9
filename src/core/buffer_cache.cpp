// The large-buffer cache (see buffer_cache.h): a short list of released mappings searched by
// exact page-rounded size, most recently released first; eviction unmaps the oldest.
#include "core/buffer_cache.h"

#include <sys/mman.h>

#include <cstdint>
#include <mutex>
#include <vector>

#include "core/error.h"

namespace tensorpar {
namespace {

constexpr size_t kPage = 4096;
constexpr size_t kHugePage = size_t(2) << 20;

// Under AddressSanitizer a cached buffer is made inaccessible, so a use after release still
// faults as it did on an unmapped one (ASan does not track mappings); elsewhere that mprotect
// would cost the TLB shootdown the cache exists to avoid.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kGuardCached = true;
#else
constexpr bool kGuardCached = false;
#endif

size_t page_round(size_t n) { return (n + kPage - 1) / kPage * kPage; }

// A fresh anonymous mapping of `bytes` (page-rounded), or MAP_FAILED. From kHugePageFrom up it
// starts on a 2 MiB boundary and asks for transparent huge pages: a weight matrix streamed once
// per decoded token then costs a TLB miss per 2 MiB instead of per 4 KiB (hardware prefetchers
// stop at every 4 KiB page boundary of a TLB miss). Where THP is off it is a plain mapping.
void* map_fresh(size_t bytes) {
  if (bytes < kHugePageFrom) return mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* p = map_huge_page_aligned(bytes);
  return p ? p : MAP_FAILED;
}

struct Cache {
  struct Entry {
    void* p;
    size_t bytes;
  };
  std::mutex mu;
  std::vector<Entry> entries;  // oldest release first
  size_t bytes = 0;
};

thread_local int bypass_depth = 0;

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: buffers may be freed during static teardown
  return *c;
}

}  // namespace

void* large_buffer_alloc(size_t n, bool* zeroed) {
  const size_t bytes = page_round(n);
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    for (size_t i = c.entries.size(); i-- > 0;) {
      if (c.entries[i].bytes != bytes) continue;
      void* p = c.entries[i].p;
      c.entries.erase(c.entries.begin() + std::ptrdiff_t(i));
      c.bytes -= bytes;
      if (kGuardCached && mprotect(p, bytes, PROT_READ | PROT_WRITE) != 0) {
        munmap(p, bytes);  // cannot be made usable again: take a fresh mapping instead
        break;
      }
      *zeroed = false;
      return p;
    }
  }
  void* p = map_fresh(bytes);
  if (p == MAP_FAILED) {
    release_cached_buffers();  // the cache may hold what the system lacks
    p = map_fresh(bytes);
  }
  TP_CHECK(p != MAP_FAILED, "[aligned_alloc] out of memory allocating ", n, " bytes");
  *zeroed = true;
  return p;
}

void large_buffer_free(void* p, size_t n) noexcept {
  const size_t bytes = page_round(n);
  // Runs in a deleter: nothing here may throw. A buffer that cannot be cached (over the cap,
  // bypassed, unguardable, or no memory for the list) is unmapped.
  bool cached = false;
  std::vector<Cache::Entry> evicted;
  try {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    if (bytes <= kBufferCacheBytes && bypass_depth == 0) {
      c.entries.reserve(c.entries.size() + 1);  // the allocations first: a throw changes nothing
      size_t drop = 0, total = c.bytes + bytes;
      while (total > kBufferCacheBytes) total -= c.entries[drop++].bytes;  // the oldest go
      evicted.reserve(drop);
      if (!kGuardCached || mprotect(p, bytes, PROT_NONE) == 0) {
        evicted.assign(c.entries.begin(), c.entries.begin() + std::ptrdiff_t(drop));
        c.entries.erase(c.entries.begin(), c.entries.begin() + std::ptrdiff_t(drop));
        c.entries.push_back({p, bytes});
        c.bytes = total;
        cached = true;
      }
    }
  } catch (...) {
    // No memory for the list: the buffer is unmapped below instead.
  }
  if (!cached) munmap(p, bytes);
  for (const Cache::Entry& e : evicted) munmap(e.p, e.bytes);  // outside the lock
}

void release_cached_buffers() {
  std::vector<Cache::Entry> all;
  {
    Cache& c = cache();
    std::lock_guard<std::mutex> lock(c.mu);
    all.swap(c.entries);
    c.bytes = 0;
  }
  for (const Cache::Entry& e : all) munmap(e.p, e.bytes);
}

void* map_huge_page_aligned(size_t bytes) {
  const size_t span = bytes + kHugePage;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (begin + kHugePage - 1) / kHugePage * kHugePage;
  if (aligned > begin) munmap(raw, aligned - begin);
  if (const size_t tail = begin + span - (aligned + bytes); tail > 0)
    munmap(reinterpret_cast<void*>(aligned + bytes), tail);
  void* p = reinterpret_cast<void*>(aligned);
  madvise(p, bytes, MADV_HUGEPAGE);  // advice only: a kernel without THP ignores it
  return p;
}

BufferCacheBypass::BufferCacheBypass() { ++bypass_depth; }
BufferCacheBypass::~BufferCacheBypass() { --bypass_depth; }

int64_t cached_buffer_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return int64_t(c.bytes);
}

}  // namespace tensorpar

// Large buffers (>= 1 MiB): anonymous mappings, and a bounded cache of released ones that the next
// allocation of the same page-rounded size takes back. A fresh mapping costs a page fault and a
// kernel page clear per 4 KiB touched, and unmapping one in a multi-threaded process interrupts
// every core the process runs on (TLB shootdown); a training step releases and re-allocates the
// same few dozen shapes every step, so without the cache that churn took ~25% of a 2-thread
// step. Fresh mappings are zero pages that cost nothing until touched (zeros() of a weight that
// loading overwrites never reaches the resident set); reused ones are not zero. Fresh mappings
// from 4 MiB up start on a 2 MiB boundary and are advised to use transparent huge pages (weights
// streamed once per decoded token read 2-15% faster, docs/BENCHMARKS.md).
// The cache is process-wide (like malloc's arenas), thread-safe, and holds at most
// kBufferCacheBytes; release_cached_buffers() returns it all to the OS. One-off phases whose
// temporaries will not repeat (loading a model) run under a BufferCacheBypass, so their freed
// buffers are unmapped at once instead of raising the resident peak.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensorpar {

constexpr size_t kLargeBufferBytes = size_t(1) << 20;   // buffers from here up are mappings
constexpr size_t kHugePageFrom = size_t(4) << 20;       // fresh mappings from here up: huge pages
constexpr size_t kBufferCacheBytes = size_t(256) << 20;  // released mappings kept for reuse

// A fresh anonymous mapping of `bytes` (page-rounded by the kernel) that starts on a 2 MiB
// boundary, advised MADV_HUGEPAGE; nullptr when mmap fails. Released with munmap(p, bytes).
void* map_huge_page_aligned(size_t bytes);
// n >= kLargeBufferBytes. *zeroed: whether the memory is known to be all zero (a fresh mapping).
void* large_buffer_alloc(size_t n, bool* zeroed);
// Gives back a buffer of large_buffer_alloc(n): cached (evicting the least recently released
// beyond the cap) or unmapped.
void large_buffer_free(void* p, size_t n) noexcept;
// Unmaps every cached buffer.
void release_cached_buffers();
// Bytes held in the cache now.
int64_t cached_buffer_bytes();

// While one lives, buffers released by this thread are unmapped, not cached (per thread: each
// rank thread opts in for itself). Nests.
class BufferCacheBypass {
 public:
  BufferCacheBypass();
  ~BufferCacheBypass();
  BufferCacheBypass(const BufferCacheBypass&) = delete;
  BufferCacheBypass& operator=(const BufferCacheBypass&) = delete;
};

}  // namespace tensorpar

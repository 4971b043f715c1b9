// The large-buffer cache: a released buffer is reused by an allocation of the same page-rounded
// size (and zeros() of it is zero again), the cache never holds more than its cap, release
// empties it, a bypass unmaps instead (for its own thread only), and concurrent allocate/free
// from several threads keeps it consistent, and mappings from 4 MiB up are 2 MiB aligned.
#include "core/buffer_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "core/tensor.h"

namespace tensorpar {
namespace {

TEST(BufferCache, ReleasedBufferIsReusedAndZeroedAgain) {
  release_cached_buffers();
  const int64_t n = 3 << 18;  // 768 Ki floats = 3 MiB
  void* first = nullptr;
  {
    Tensor t = Tensor::zeros({n}, DType::kF32);
    for (float v : t.to_vector()) ASSERT_EQ(v, 0.0f);
    std::memset(t.raw(), 0x7f, size_t(t.nbytes()));  // garbage for the next user
    first = t.raw();
  }
  EXPECT_GE(cached_buffer_bytes(), 3 << 20);
  {
    Tensor again = Tensor::zeros({n}, DType::kF32);
    EXPECT_EQ(again.raw(), first);  // the same mapping came back
    for (float v : again.to_vector()) ASSERT_EQ(v, 0.0f);
    EXPECT_EQ(cached_buffer_bytes(), 0);
  }
  // Another page-rounded size does not take it (it stays cached, so a new mapping is elsewhere).
  Tensor other = Tensor::empty({n + 4096}, DType::kF32);
  EXPECT_NE(other.raw(), first);
  EXPECT_GE(cached_buffer_bytes(), 3 << 20);
}

// From 4 MiB up a fresh mapping starts on a 2 MiB boundary (so that transparent huge pages can
// back all of it); trimming the over-allocated head and tail must leave exactly the buffer mapped:
// every byte usable, and unmapping it (the cache bypassed) must not fault or leak the slack.
TEST(BufferCache, LargeMappingsAreHugePageAlignedAndWhole) {
  release_cached_buffers();
  BufferCacheBypass bypass;
  for (const size_t bytes : {size_t(4) << 20, (size_t(9) << 20) + 4096, size_t(33) << 20}) {
    bool zeroed = false;
    void* p = large_buffer_alloc(bytes, &zeroed);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(zeroed);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t(2) << 20), 0u) << bytes << " bytes";
    auto* c = static_cast<unsigned char*>(p);
    EXPECT_EQ(c[0], 0);
    EXPECT_EQ(c[bytes - 1], 0);
    std::memset(c, 0x5a, bytes);
    EXPECT_EQ(c[bytes / 2], 0x5a);
    large_buffer_free(p, bytes);
  }
  // Below 4 MiB: page-aligned only, as before.
  bool zeroed = false;
  void* small = large_buffer_alloc(size_t(3) << 20, &zeroed);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(small) % 4096, 0u);
  large_buffer_free(small, size_t(3) << 20);
  EXPECT_EQ(cached_buffer_bytes(), 0);
}

TEST(BufferCache, HoldsAtMostItsCapAndReleasesEverything) {
  release_cached_buffers();
  const size_t chunk = kBufferCacheBytes / 4 + 4096;
  {
    std::vector<Tensor> many;
    for (int i = 0; i < 6; ++i) many.push_back(Tensor::empty({int64_t(chunk)}, DType::kU8));
  }
  EXPECT_LE(cached_buffer_bytes(), int64_t(kBufferCacheBytes));
  EXPECT_GE(cached_buffer_bytes(), int64_t(3 * chunk));
  { Tensor huge = Tensor::empty({int64_t(kBufferCacheBytes) + 4096}, DType::kU8); }  // never cached
  EXPECT_LE(cached_buffer_bytes(), int64_t(kBufferCacheBytes));
  release_cached_buffers();
  EXPECT_EQ(cached_buffer_bytes(), 0);
}

TEST(BufferCache, BypassUnmapsInsteadOfCaching) {
  release_cached_buffers();
  {
    const BufferCacheBypass bypass;
    { Tensor t = Tensor::empty({int64_t(1) << 20}, DType::kF32); }
    EXPECT_EQ(cached_buffer_bytes(), 0);
  }
  { Tensor t = Tensor::empty({int64_t(1) << 20}, DType::kF32); }
  EXPECT_EQ(cached_buffer_bytes(), int64_t(4) << 20);
  // Per thread: another thread's bypass does not apply here.
  std::thread other([] {
    const BufferCacheBypass bypass;
    { Tensor t = Tensor::empty({int64_t(1) << 19}, DType::kF32); }
  });
  other.join();
  EXPECT_EQ(cached_buffer_bytes(), int64_t(4) << 20);
  release_cached_buffers();
}

// Every buffer is dirtied in full before it goes back to the cache, and every zeros() must come
// back zero in full: a reused buffer that was not re-zeroed (wholly or in part) fails here.
TEST(BufferCache, ConcurrentAllocateAndFree) {
  release_cached_buffers();
  std::atomic<int64_t> nonzero_floats{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &nonzero_floats] {
      for (int i = 0; i < 50; ++i) {
        Tensor a = Tensor::zeros({int64_t(1 << 18) * (1 + (i + t) % 3)}, DType::kF32);
        const float* p = a.data<float>();
        nonzero_floats += std::count_if(p, p + a.numel(), [](float v) { return v != 0.0f; });
        std::memset(a.raw(), 0x7f, size_t(a.nbytes()));  // garbage for the next user
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(nonzero_floats.load(), 0);
  EXPECT_LE(cached_buffer_bytes(), int64_t(kBufferCacheBytes));
  release_cached_buffers();
}

#if defined(__SANITIZE_ADDRESS__)
// Sanitizer builds keep catching a use of a released large buffer: cached ones are inaccessible.
TEST(BufferCacheDeathTest, UseAfterReleaseFaultsUnderSanitizers) {
  EXPECT_DEATH(
      {
        float* p = nullptr;
        {
          Tensor t = Tensor::zeros({int64_t(1) << 19}, DType::kF32);
          p = t.data<float>();
        }
        volatile float x = p[7];
        (void)x;
      },
      "");
}
#endif

}  // namespace
}  // namespace tensorpar

// The weight arena: inside a scope, buffers of its size range are carved one after another from a
// 2 MiB-aligned mapping (zero, as Tensor::zeros trusts), outlive the scope, and a chunk that fills
// up is followed by a new one; outside a scope, or out of the range, allocation is the usual one.
// Under AddressSanitizer the arena is off (every buffer keeps its own bounds).
#include "core/weight_arena.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"

namespace tensorpar {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kArenaExpected = false;
#else
constexpr bool kArenaExpected = true;
#endif

uintptr_t address(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw()); }

TEST(WeightArena, CarvesZeroBuffersSideBySideThatOutliveTheScope) {
  const int64_t n = 16384;  // 64 KiB of f32
  EXPECT_EQ(weight_arena_alloc(size_t(n) * 4), nullptr);  // no scope: the usual allocation
  std::vector<Tensor> kept;
  {
    const WeightArena arena;
    if (!kArenaExpected) {
      EXPECT_EQ(weight_arena_alloc(size_t(n) * 4), nullptr);
      GTEST_SKIP() << "the arena is off under AddressSanitizer";
    }
    for (int i = 0; i < 3; ++i) kept.push_back(Tensor::zeros({n}, DType::kF32));
    EXPECT_EQ(address(kept[0]) % (size_t(2) << 20), 0u);  // a fresh chunk starts on a huge page
    EXPECT_EQ(address(kept[1]), address(kept[0]) + 4 * n);
    EXPECT_EQ(address(kept[2]), address(kept[1]) + 4 * n);
    for (const Tensor& t : kept)
      for (float v : t.to_vector()) ASSERT_EQ(v, 0.0f);
    // Too small or from 4 MiB up: not carved.
    EXPECT_EQ(weight_arena_alloc(kArenaMinBytes - 64), nullptr);
    EXPECT_EQ(weight_arena_alloc(size_t(4) << 20), nullptr);
    // A second buffer of 3 MiB does not fit what is left of a chunk after enough of them: a new
    // chunk, again on a huge-page boundary.
    std::vector<Tensor> big;
    for (size_t used = 3 * 4 * n; used + (3 << 20) <= kArenaChunkBytes; used += 3 << 20)
      big.push_back(Tensor::empty({3 << 18}, DType::kF32));
    Tensor next = Tensor::empty({3 << 18}, DType::kF32);
    EXPECT_EQ(address(next) % (size_t(2) << 20), 0u);
    EXPECT_NE(address(next), address(big.back()) + (3 << 20));
  }
  // The scope is gone, its buffers are not: write and read them back.
  for (Tensor& t : kept) std::memset(t.raw(), 0x3c, size_t(t.nbytes()));
  for (const Tensor& t : kept) EXPECT_EQ(static_cast<const unsigned char*>(t.raw())[t.nbytes() - 1], 0x3c);
  EXPECT_EQ(weight_arena_alloc(size_t(n) * 4), nullptr);
}

TEST(WeightArena, NestedScopesCarveFromTheInnermost) {
  if (!kArenaExpected) GTEST_SKIP() << "the arena is off under AddressSanitizer";
  const WeightArena outer;
  Tensor a = Tensor::empty({16384}, DType::kF32);
  Tensor b;
  {
    const WeightArena inner;
    b = Tensor::empty({16384}, DType::kF32);
  }
  Tensor c = Tensor::empty({16384}, DType::kF32);
  EXPECT_EQ(address(c), address(a) + 65536);  // the outer chunk again, after a
  EXPECT_NE(address(b), address(a) + 65536);  // b came from the inner scope's own chunk
}

}  // namespace
}  // namespace tensorpar

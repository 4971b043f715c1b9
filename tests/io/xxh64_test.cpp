// XXH64 against published digests (xxHash's own test values and the Python xxhash package's
// documented example), covering the short path (< 32 bytes) and the four-lane path.
#include "io/xxh64.h"

#include <gtest/gtest.h>

#include <string_view>

namespace tensorpar {
namespace {

uint64_t of(std::string_view s) { return xxh64(std::as_bytes(std::span(s.data(), s.size()))); }

TEST(Xxh64, PublishedDigests) {
  EXPECT_EQ(xxh64_hex(of("")), "ef46db3751d8e999");
  EXPECT_EQ(xxh64_hex(of("a")), "d24ec4f1a98c6e5b");
  EXPECT_EQ(xxh64_hex(of("abc")), "44bc2cf5ad770999");
  EXPECT_EQ(xxh64_hex(of("Nobody inspects the spammish repetition")), "fbcea83c8a378bf1");
}

TEST(Xxh64, EveryByteMatters) {
  std::string s(1000, 'x');
  const uint64_t h = of(s);
  for (size_t i : {size_t(0), size_t(31), size_t(32), size_t(500), size_t(996), size_t(999)}) {
    std::string t = s;
    t[i] ^= 1;
    EXPECT_NE(of(t), h) << "byte " << i;
  }
}

}  // namespace
}  // namespace tensorpar

// XXH64 through xxHash itself (libxxhash).
#include "io/xxh64.h"

#include <xxhash.h>

#include <cstdio>

namespace tensorpar {

uint64_t xxh64(std::span<const std::byte> data, uint64_t seed) {
  return XXH64(data.data(), data.size(), seed);
}

std::string xxh64_hex(uint64_t h) {
  char b[17];
  std::snprintf(b, sizeof(b), "%016llx", static_cast<unsigned long long>(h));
  return b;
}

}  // namespace tensorpar

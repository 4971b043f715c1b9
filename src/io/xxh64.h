// XXH64 (xxHash, 64-bit, seed 0; libxxhash): the checksum a checkpoint's index records for
// each shard file, so a corrupt or truncated shard is refused at resume instead of loaded. Fast
// (several GB/s), and the same digest as Python's `xxhash.xxh64` for checking files by hand.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace tensorpar {

uint64_t xxh64(std::span<const std::byte> data, uint64_t seed = 0);
// 16 lowercase hex digits.
std::string xxh64_hex(uint64_t h);

}  // namespace tensorpar

// Overflow-checked size arithmetic: a shape or file offset whose byte count overflows is a
// caller error, never a silent wrap (the GGUF parser CVEs of 2024 were exactly this).
#pragma once

#include <cstdint>

#include "core/error.h"

namespace tensorpar {

inline int64_t checked_mul(int64_t a, int64_t b, const char* where) {
  int64_t r = 0;
  TP_CHECK(!__builtin_mul_overflow(a, b, &r), "[", where, "] size overflow: ", a, " * ", b);
  return r;
}

inline int64_t checked_add(int64_t a, int64_t b, const char* where) {
  int64_t r = 0;
  TP_CHECK(!__builtin_add_overflow(a, b, &r), "[", where, "] size overflow: ", a, " + ", b);
  return r;
}

inline uint64_t checked_mul_u64(uint64_t a, uint64_t b, const char* where) {
  uint64_t r = 0;
  TP_CHECK(!__builtin_mul_overflow(a, b, &r), "[", where, "] size overflow: ", a, " * ", b);
  return r;
}

inline uint64_t checked_add_u64(uint64_t a, uint64_t b, const char* where) {
  uint64_t r = 0;
  TP_CHECK(!__builtin_add_overflow(a, b, &r), "[", where, "] size overflow: ", a, " + ", b);
  return r;
}

}  // namespace tensorpar

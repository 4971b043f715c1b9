// The few Unicode facts the tokenizer handles itself: UTF-8 decoding that never fails (an invalid
// byte run is one "character" of its own), the White_Space property (added tokens' lstrip/rstrip,
// the Strip normalizer), and lossy UTF-8 repair (invalid runs -> U+FFFD, as HF's decode does).
// Character classes and normal forms come from PCRE2 and ICU (regex.h, normalizer.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tensorpar {

// One step of UTF-8 decoding at a byte offset.
struct Utf8Char {
  uint32_t cp;  // the code point; 0xFFFD when !valid
  int len;      // bytes consumed, >= 1: for an invalid run, its maximal subpart (Unicode ch. 3)
  bool valid;
};

// Decodes the character starting at s[i] (i < s.size()).
Utf8Char utf8_next(std::string_view s, size_t i);

// Appends the UTF-8 encoding of code point cp (cp < 0x110000).
void utf8_append(std::string& out, uint32_t cp);

// Valid UTF-8: every invalid maximal subpart replaced by U+FFFD (same as Rust from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);

// Length of the trailing bytes of s that form an incomplete but still completable character
// (0 to 3); a streaming decoder holds these back until the next bytes arrive.
size_t utf8_incomplete_tail(std::string_view s);

bool is_whitespace(uint32_t cp);  // \s: the White_Space property

}  // namespace tensorpar

// The few Unicode facts the byte-level BPE tokenizer needs: UTF-8 decoding that never fails (an
// invalid byte run is one "character" of its own), the \p{L} / \p{N} / \s classes of the
// pre-tokenizer patterns, and lossy UTF-8 repair (invalid runs -> U+FFFD, as HF's decode does).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tensorpar {

namespace unicode_detail {
struct CodeRange {
  uint32_t lo, hi;  // inclusive
};
extern const CodeRange kLetterRanges[];
extern const int kLetterRangeCount;
extern const CodeRange kNumberRanges[];
extern const int kNumberRangeCount;
}  // namespace unicode_detail

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

bool is_letter(uint32_t cp);      // \p{L}: Lu Ll Lt Lm Lo
bool is_number(uint32_t cp);      // \p{N}: Nd Nl No
bool is_whitespace(uint32_t cp);  // \s: the White_Space property

}  // namespace tensorpar

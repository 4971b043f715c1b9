// Unicode NFC normalization (canonical decomposition, canonical ordering, canonical composition),
// the normalizer of Qwen2's tokenizer.json. Text below U+0300 is returned as is without work.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace tensorpar {

namespace nfc_detail {
struct CccRange {
  uint32_t lo, hi;  // inclusive
  uint8_t ccc;
};
struct Decomposition {
  uint32_t cp, first, second;  // second == 0: a singleton
  uint8_t recomposes;          // a primary composite: NFC puts (first, second) back together
};
extern const CccRange kCccRanges[];
extern const int kCccRangeCount;
extern const Decomposition kDecompositions[];
extern const int kDecompositionCount;
}  // namespace nfc_detail

// The canonical combining class of cp (0 for starters).
uint8_t canonical_combining_class(uint32_t cp);

// NFC of UTF-8 text. Invalid UTF-8 bytes are kept as they are and act as starters.
std::string nfc_normalize(std::string_view text);

}  // namespace tensorpar

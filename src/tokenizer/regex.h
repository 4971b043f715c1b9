// A compiled regular expression for the Split pre-tokenizer and the Replace normalizer: PCRE2 with
// UTF-8 and Unicode properties (\p{L}, \p{N}, case-insensitive groups), as HF tokenizers' Oniguruma
// patterns are written. Invalid UTF-8 in the subject never matches, so it falls between matches.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tensorpar {

class Regex {
 public:
  // Compiles pattern; throws Error naming it, the offset and PCRE2's message when it is invalid.
  explicit Regex(std::string_view pattern);
  // The half-open byte ranges of the successive non-overlapping matches in text, leftmost first
  // (empty matches are skipped, as HF does).
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::shared_ptr<const Code> code_;  // immutable once compiled: shared by copies
};

// Escapes every regex metacharacter of s, for a literal String pattern.
std::string regex_escape(std::string_view s);

}  // namespace tensorpar

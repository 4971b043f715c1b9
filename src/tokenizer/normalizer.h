// Normalizers of HF tokenizers (the "normalizer" of tokenizer.json), applied to each stretch of
// text between added tokens before pre-tokenization: Unicode normal forms and lower-casing (ICU),
// Replace (a literal or a regex), Prepend, Strip, and Sequence of these; StripAccents and
// BertNormalizer are sequences of these steps.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace tensorpar {

struct NormalizerStep {
  // kIsolate: a space before and after each match of pattern (BERT's Chinese characters).
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kIsolate, kPrepend, kStrip };
  Kind kind;
  std::optional<Regex> pattern;      // kReplace, kIsolate
  std::string content;               // kReplace: the replacement; kPrepend: the prefix
  bool left = false, right = false;  // kStrip
};

// A sequence of steps (empty: the identity).
class Normalizer {
 public:
  void add(NormalizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // The normalized text. Invalid UTF-8 bytes pass through unchanged and split the text into
  // separately normalized runs.
  std::string apply(std::string_view text) const;

 private:
  std::vector<NormalizerStep> steps_;
};

// Unicode normal forms and full lower-casing of valid UTF-8 runs (ICU); exposed for the tests.
std::string unicode_normalize(std::string_view text, NormalizerStep::Kind form);

}  // namespace tensorpar

// Pre-tokenizers of HF tokenizers: the steps that split a normalized stretch of text into the
// pieces the model encodes separately. Split (any regex or literal, every split behaviour),
// ByteLevel (its GPT-2 regex, prefix space), Metaspace, and Sequence of these; Digits, Whitespace,
// WhitespaceSplit and Punctuation are Splits on fixed patterns. Pieces keep raw bytes: the
// byte-level character mapping is applied to the vocabulary instead (see bpe.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace tensorpar {

// How Split treats the matches of its pattern (HF's SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  // Digits, Punctuation, Whitespace and WhitespaceSplit are Split steps with a fixed pattern.
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class Prepend { kAlways, kFirst, kNever };  // Metaspace's prepend_scheme
  Kind kind = Kind::kSplit;
  std::optional<Regex> pattern;  // kSplit (also the ByteLevel regex when use_regex)
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool flag = false;        // kByteLevel: add_prefix_space; kMetaspace: split
  std::string replacement;  // kMetaspace ("▁")
  Prepend prepend = Prepend::kAlways;
};

// The regexes of the usual pre-tokenizers, as written in tokenizer.json files.
extern const std::string_view kGpt2SplitPattern;
extern const std::string_view kLlama3SplitPattern;
extern const std::string_view kQwen2SplitPattern;

class PreTokenizer {
 public:
  void add(PreTokenizerStep step) { steps_.push_back(std::move(step)); }
  bool empty() const { return steps_.empty(); }
  // Appends the pieces of text to out (the identity when there are no steps). first: text is the
  // start of the input (Metaspace's prepend_scheme "first").
  void split(std::string_view text, bool first, std::vector<std::string>& out) const;

  // A Split step on pattern with the given behaviour.
  static PreTokenizerStep split_step(std::string_view pattern, SplitBehavior behavior,
                                     bool invert = false);
  static PreTokenizerStep byte_level_step(bool add_prefix_space, bool use_regex);

 private:
  std::vector<PreTokenizerStep> steps_;
};

// The pre-tokenizer of a byte-level BPE GGUF from its tokenizer.ggml.pre name ("gpt2", "default",
// "llama-bpe", "qwen2", "smollm", ...); throws Error naming the known names for another.
// ignore_merges: set to whether that family's tokenizer.json sets it (Llama 3).
PreTokenizer pre_tokenizer_from_gguf_name(std::string_view name, bool* ignore_merges);

}  // namespace tensorpar

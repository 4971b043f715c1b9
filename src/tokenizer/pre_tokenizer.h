// Pre-tokenization: splitting text into the pieces that BPE encodes separately. Each supported
// regex of the HF/llama.cpp tokenizers is a hand-written scanner over character classes that
// reproduces the regex engine's leftmost-first, greedy-with-backtracking matches.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tensorpar {

enum class PreTokenizer {
  kGpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kLlama3,  // (?i:'s|...)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
            // ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kQwen2,   // as kLlama3 with \p{N} (single digits)
  kSmolLM,  // every \p{N} isolated (Digits(individual_digits)), then kGpt2 on the rest
};

// Parses a name as used by GGUF's tokenizer.ggml.pre ("gpt2", "llama-bpe", "qwen2", "smollm", ...).
// Throws Error naming the supported names for an unknown one.
PreTokenizer pre_tokenizer_from_name(std::string_view name);
std::string pre_tokenizer_name(PreTokenizer kind);

// Appends the pieces of text (views into it, in order, covering it exactly) to out. Invalid UTF-8
// bytes count as punctuation-like characters, so any byte string splits and round-trips.
void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& out);

}  // namespace tensorpar

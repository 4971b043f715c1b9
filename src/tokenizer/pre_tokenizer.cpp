// The pre-tokenizer scanners. Each alternative of a pattern is a small function returning the end
// of its match at char index i (or i when it fails); the first alternative that matches wins, as
// in a backtracking regex engine. Lookahead (?!\S) is resolved by backing off one character.
#include "tokenizer/pre_tokenizer.h"

#include <cstdint>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tensorpar {
namespace {

enum class Cls : uint8_t { kLetter, kNumber, kSpace, kOther };

struct Chars {
  std::vector<uint32_t> cp;
  std::vector<Cls> cls;
  std::vector<size_t> off;  // byte offset of each char; off[n] = text size
  size_t n = 0;
};

Chars classify(std::string_view text) {
  Chars c;
  for (size_t i = 0; i < text.size();) {
    const Utf8Char u = utf8_next(text, i);
    const uint32_t cp = u.valid ? u.cp : 0xFFFFFFFFu;  // invalid bytes: a class of their own
    Cls k = Cls::kOther;
    if (u.valid) {
      if (is_letter(cp)) {
        k = Cls::kLetter;
      } else if (is_number(cp)) {
        k = Cls::kNumber;
      } else if (is_whitespace(cp)) {
        k = Cls::kSpace;
      }
    }
    c.cp.push_back(cp);
    c.cls.push_back(k);
    c.off.push_back(i);
    i += static_cast<size_t>(u.len);
  }
  c.n = c.cp.size();
  c.off.push_back(text.size());
  return c;
}

uint32_t lower_ascii(uint32_t cp) {
  return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
}

// 's|'t|'re|'ve|'m|'ll|'d over chars [i, end); ASCII-case-insensitive for the Llama-3 family
// (HF tokenizers does not fold U+017F long s to 's' here, so neither do we).
size_t contraction(const Chars& c, size_t i, size_t end, bool ignore_case) {
  if (c.cp[i] != '\'' || i + 1 >= end) return i;
  auto at = [&](size_t k) {
    uint32_t cp = c.cp[k];
    if (ignore_case) cp = lower_ascii(cp);
    return cp;
  };
  const uint32_t a = at(i + 1);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
  if (i + 2 < end) {
    const uint32_t b = at(i + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
  }
  return i;
}

size_t run_of(const Chars& c, size_t i, size_t end, Cls k) {
  while (i < end && c.cls[i] == k) ++i;
  return i;
}

// " ?X+" where X is a class: an optional U+0020 then at least one X.
size_t space_then_run(const Chars& c, size_t i, size_t end, Cls k) {
  size_t j = i;
  if (c.cp[j] == ' ' && j + 1 < end && c.cls[j + 1] == k) ++j;
  if (c.cls[j] != k) return i;
  return run_of(c, j, end, k);
}

// \s+(?!\S)|\s+ : a whitespace run, less its last char when a non-space follows and the run has
// more than one char (that char then joins the next piece).
size_t trailing_space(const Chars& c, size_t i, size_t end) {
  if (c.cls[i] != Cls::kSpace) return i;
  const size_t k = run_of(c, i, end, Cls::kSpace);
  if (k == end || k - i == 1) return k;
  return k - 1;
}

size_t gpt2_match(const Chars& c, size_t i, size_t end) {
  size_t j;
  if ((j = contraction(c, i, end, false)) > i) return j;
  if ((j = space_then_run(c, i, end, Cls::kLetter)) > i) return j;
  if ((j = space_then_run(c, i, end, Cls::kNumber)) > i) return j;
  if ((j = space_then_run(c, i, end, Cls::kOther)) > i) return j;
  return trailing_space(c, i, end);
}

bool is_crlf(uint32_t cp) {
  return cp == '\r' || cp == '\n';
}

size_t llama3_match(const Chars& c, size_t i, size_t end, size_t max_digits) {
  size_t j;
  if ((j = contraction(c, i, end, true)) > i) return j;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  j = i;
  if (c.cls[i] != Cls::kLetter && c.cls[i] != Cls::kNumber && !is_crlf(c.cp[i]) && i + 1 < end &&
      c.cls[i + 1] == Cls::kLetter)
    ++j;
  if (c.cls[j] == Cls::kLetter) return run_of(c, j, end, Cls::kLetter);
  // \p{N}{1,max_digits}
  if (c.cls[i] == Cls::kNumber) {
    j = i;
    while (j < end && j - i < max_digits && c.cls[j] == Cls::kNumber) ++j;
    return j;
  }
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  if ((j = space_then_run(c, i, end, Cls::kOther)) > i) {
    while (j < end && is_crlf(c.cp[j])) ++j;
    return j;
  }
  if (c.cls[i] != Cls::kSpace) return i;  // unreachable: every class is handled above
  // \s*[\r\n]+ : up to and including the last CR/LF of the whitespace run.
  const size_t k = run_of(c, i, end, Cls::kSpace);
  for (size_t m = k; m > i; --m)
    if (is_crlf(c.cp[m - 1])) return m;
  return trailing_space(c, i, end);
}

template <typename Match>
void scan(const Chars& c, std::string_view text, size_t begin, size_t end, Match match,
          std::vector<std::string_view>& out) {
  for (size_t i = begin; i < end;) {
    size_t j = match(c, i, end);
    TP_ASSERT(j > i, "pre-tokenizer made no progress");
    out.push_back(text.substr(c.off[i], c.off[j] - c.off[i]));
    i = j;
  }
}

}  // namespace

PreTokenizer pre_tokenizer_from_name(std::string_view name) {
  if (name == "gpt2" || name == "gpt-2" || name == "default" || name.empty())
    return PreTokenizer::kGpt2;
  if (name == "llama3" || name == "llama-bpe" || name == "llama-3") return PreTokenizer::kLlama3;
  if (name == "qwen2" || name == "qwen") return PreTokenizer::kQwen2;
  if (name == "smollm" || name == "smollm2") return PreTokenizer::kSmolLM;
  TP_CHECK(false, "[pre_tokenizer_from_name] unsupported pre-tokenizer: got '", name,
           "', expected one of gpt2, default, llama3, llama-bpe, qwen2, smollm");
  return PreTokenizer::kGpt2;
}

std::string pre_tokenizer_name(PreTokenizer kind) {
  switch (kind) {
    case PreTokenizer::kGpt2:
      return "gpt2";
    case PreTokenizer::kLlama3:
      return "llama3";
    case PreTokenizer::kQwen2:
      return "qwen2";
    case PreTokenizer::kSmolLM:
      return "smollm";
  }
  return "?";
}

void pre_tokenize(PreTokenizer kind, std::string_view text, std::vector<std::string_view>& out) {
  if (text.empty()) return;
  const Chars c = classify(text);
  switch (kind) {
    case PreTokenizer::kGpt2:
      scan(c, text, 0, c.n, gpt2_match, out);
      break;
    case PreTokenizer::kLlama3:
    case PreTokenizer::kQwen2: {
      const size_t digits = kind == PreTokenizer::kLlama3 ? 3 : 1;
      scan(
          c, text, 0, c.n,
          [digits](const Chars& cc, size_t i, size_t end) {
            return llama3_match(cc, i, end, digits);
          },
          out);
      break;
    }
    case PreTokenizer::kSmolLM: {
      // Digits split first; each stretch between digits is its own text for the GPT-2 pattern
      // (its lookahead cannot see past a digit).
      size_t seg = 0;
      for (size_t i = 0; i <= c.n; ++i) {
        if (i < c.n && c.cls[i] != Cls::kNumber) continue;
        scan(c, text, seg, i, gpt2_match, out);
        if (i < c.n) out.push_back(text.substr(c.off[i], c.off[i + 1] - c.off[i]));
        seg = i + 1;
      }
      break;
    }
  }
}

}  // namespace tensorpar

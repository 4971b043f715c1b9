// Pre-tokenizer steps. Each step maps every piece so far to its sub-pieces; Split computes the
// match / non-match segments of a piece with the regex and then groups them by its behaviour.
#include "tokenizer/pre_tokenizer.h"

#include "core/error.h"

namespace tensorpar {

const std::string_view kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const std::string_view kLlama3SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
const std::string_view kQwen2SplitPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

struct Segment {
  size_t begin, end;
  bool match;
};

// Splits piece by the step's pattern and behaviour (HF's NormalizedString::split).
void split_piece(const PreTokenizerStep& st, const std::string& piece,
                 std::vector<std::string>& out) {
  std::vector<Segment> segs;
  size_t done = 0;
  for (const auto& [b, e] : st.pattern->find_all(piece)) {
    if (b > done) segs.push_back({done, b, st.invert});
    segs.push_back({b, e, !st.invert});
    done = e;
  }
  if (done < piece.size()) segs.push_back({done, piece.size(), st.invert});
  auto text = [&](const Segment& s) { return piece.substr(s.begin, s.end - s.begin); };
  std::vector<std::string> parts;
  switch (st.behavior) {
    case SplitBehavior::kRemoved:
      for (const Segment& s : segs)
        if (!s.match) parts.push_back(text(s));
      break;
    case SplitBehavior::kIsolated:
      for (const Segment& s : segs) parts.push_back(text(s));
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.match && !parts.empty() && !prev_match)
          parts.back() += text(s);
        else
          parts.push_back(text(s));
        prev_match = s.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (prev_match && !s.match && !parts.empty())
          parts.back() += text(s);
        else
          parts.push_back(text(s));
        prev_match = s.match;
      }
      break;
    }
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (const Segment& s : segs) {
        if (s.match && prev_match && !parts.empty())
          parts.back() += text(s);
        else
          parts.push_back(text(s));
        prev_match = s.match;
      }
      break;
    }
  }
  for (std::string& p : parts)
    if (!p.empty()) out.push_back(std::move(p));
}

void replace_spaces(std::string& s, const std::string& replacement) {
  std::string out;
  out.reserve(s.size() + 8);
  for (char c : s) {
    if (c == ' ')
      out += replacement;
    else
      out += c;
  }
  s = std::move(out);
}

std::string prefixed(std::string_view prefix, const std::string& s) {
  std::string out;
  out.reserve(prefix.size() + s.size());
  out.append(prefix);
  out.append(s);
  return out;
}

}  // namespace

PreTokenizerStep PreTokenizer::split_step(std::string_view pattern, SplitBehavior behavior,
                                          bool invert) {
  PreTokenizerStep st;
  st.pattern.emplace(pattern);
  st.behavior = behavior;
  st.invert = invert;
  return st;
}

PreTokenizerStep PreTokenizer::byte_level_step(bool add_prefix_space, bool use_regex) {
  PreTokenizerStep st;
  st.kind = PreTokenizerStep::Kind::kByteLevel;
  if (use_regex) st.pattern.emplace(kGpt2SplitPattern);
  st.flag = add_prefix_space;
  return st;
}

void PreTokenizer::split(std::string_view text, bool first, std::vector<std::string>& out) const {
  if (text.empty()) return;
  std::vector<std::string> cur{std::string(text)}, next;
  using K = PreTokenizerStep::Kind;
  for (const PreTokenizerStep& st : steps_) {
    next.clear();
    for (size_t i = 0; i < cur.size(); ++i) {
      std::string& piece = cur[i];
      switch (st.kind) {
        case K::kSplit:
          split_piece(st, piece, next);
          break;
        case K::kByteLevel:
          if (st.flag && piece[0] != ' ') piece = prefixed(" ", piece);
          if (st.pattern)
            split_piece(st, piece, next);
          else
            next.push_back(std::move(piece));
          break;
        case K::kMetaspace: {
          replace_spaces(piece, st.replacement);
          const bool prepend = st.prepend == PreTokenizerStep::Prepend::kAlways ||
                               (st.prepend == PreTokenizerStep::Prepend::kFirst && first && i == 0);
          if (prepend && piece.compare(0, st.replacement.size(), st.replacement) != 0)
            piece = prefixed(st.replacement, piece);
          if (!st.flag) {
            next.push_back(std::move(piece));
            break;
          }
          // Split before each replacement character (MergedWithNext on it).
          size_t start = 0;
          for (size_t at = piece.find(st.replacement, 1); at != std::string::npos;
               at = piece.find(st.replacement, at + st.replacement.size())) {
            next.push_back(piece.substr(start, at - start));
            start = at;
          }
          next.push_back(piece.substr(start));
          break;
        }
      }
    }
    std::swap(cur, next);
  }
  for (std::string& p : cur) out.push_back(std::move(p));
}

PreTokenizer pre_tokenizer_from_gguf_name(std::string_view name, bool* ignore_merges) {
  PreTokenizer p;
  *ignore_merges = false;
  if (name == "gpt2" || name == "gpt-2" || name == "default" || name.empty()) {
    p.add(PreTokenizer::byte_level_step(false, true));
  } else if (name == "llama3" || name == "llama-bpe" || name == "llama-3") {
    p.add(PreTokenizer::split_step(kLlama3SplitPattern, SplitBehavior::kIsolated));
    *ignore_merges = true;  // as in Llama 3's tokenizer.json
  } else if (name == "qwen2" || name == "qwen") {
    p.add(PreTokenizer::split_step(kQwen2SplitPattern, SplitBehavior::kIsolated));
  } else if (name == "smollm" || name == "smollm2") {
    p.add(PreTokenizer::split_step(R"(\p{N})", SplitBehavior::kIsolated));  // Digits(individual)
    p.add(PreTokenizer::byte_level_step(false, true));
  } else {
    TP_CHECK(false, "[pre_tokenizer_from_gguf_name] unsupported pre-tokenizer: got '", name,
             "', expected one of gpt2, default, llama3, llama-bpe, qwen2, smollm");
  }
  return p;
}

}  // namespace tensorpar

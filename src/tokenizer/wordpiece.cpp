// Greedy longest-match-first, as HF's WordPiece::tokenize: candidate ends move back one character
// at a time (whole UTF-8 characters; an invalid byte counts as one).
#include "tokenizer/wordpiece.h"

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tensorpar {

void WordPieceModel::add_token(const std::string& spelled, int32_t id) {
  vocab_.emplace(spelled, id);
}

int32_t WordPieceModel::find(std::string_view key) const {
  auto it = vocab_.find(key);
  return it == vocab_.end() ? -1 : it->second;
}

void WordPieceModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  std::vector<size_t> bounds;  // character starts, then word.size()
  for (size_t i = 0; i < word.size(); i += static_cast<size_t>(utf8_next(word, i).len))
    bounds.push_back(i);
  const size_t n_chars = bounds.size();
  bounds.push_back(word.size());
  TP_CHECK(unk_id_ >= 0 || n_chars <= max_chars_, "[WordPieceModel::encode] no unk token");
  if (n_chars > max_chars_) {
    out.push_back(unk_id_);
    return;
  }
  std::vector<int32_t> ids;
  std::string candidate;
  for (size_t start = 0; start < n_chars;) {
    int32_t hit = -1;
    size_t end = n_chars;
    for (; end > start; --end) {
      candidate.assign(start > 0 ? prefix_ : std::string());
      candidate.append(word.substr(bounds[start], bounds[end] - bounds[start]));
      hit = find(candidate);
      if (hit >= 0) break;
    }
    if (hit < 0) {
      TP_CHECK(unk_id_ >= 0, "[WordPieceModel::encode] word '", std::string(word),
               "' has no split and there is no unk token");
      out.push_back(unk_id_);
      return;
    }
    ids.push_back(hit);
    start = end;
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

}  // namespace tensorpar

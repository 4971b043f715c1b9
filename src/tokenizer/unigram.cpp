// Viterbi over byte positions, following HF's Unigram::encode_optimized: candidates are visited by
// start position and then by length, and a later one replaces an earlier one only when strictly
// better, so ties resolve the same way.
#include "tokenizer/unigram.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tensorpar {
namespace {
constexpr double kUnkPenalty = 10.0;
}

void UnigramModel::add_token(const std::string& spelled, int32_t id, double score) {
  vocab_.emplace(spelled, id);
  if (scores_.size() <= static_cast<size_t>(id)) scores_.resize(static_cast<size_t>(id) + 1, 0.0);
  scores_[static_cast<size_t>(id)] = score;
  min_score_ = vocab_.size() == 1 ? score : std::min(min_score_, score);
  max_len_ = std::max(max_len_, spelled.size());
}

int32_t UnigramModel::find(std::string_view key) const {
  auto it = vocab_.find(key);
  return it == vocab_.end() ? -1 : it->second;
}

void UnigramModel::encode(std::string_view s, std::vector<int32_t>& out) const {
  if (s.empty()) return;
  struct Node {
    int32_t id = -1;
    double score = 0;
    long start = -1;  // -1: not reached
  };
  const size_t n = s.size();
  std::vector<Node> best(n + 1);
  best[0].start = 0;
  const double unk_score = min_score_ - kUnkPenalty;
  for (size_t at = 0; at < n;) {
    const double here = best[at].score;
    const auto mblen = static_cast<size_t>(utf8_next(s, at).len);
    bool single = false;
    for (size_t len = 1; len <= std::min(max_len_, n - at); ++len) {
      const int32_t id = find(s.substr(at, len));
      if (id < 0) continue;
      Node& t = best[at + len];
      const double cand = scores_[static_cast<size_t>(id)] + here;
      if (t.start < 0 || cand > t.score) t = {id, cand, static_cast<long>(at)};
      if (len == mblen) single = true;
    }
    if (!single) {
      TP_CHECK(unk_id_ >= 0, "[UnigramModel::encode] a character without a token and no unk_id: '",
               std::string(s.substr(at, mblen)), "'");
      Node& t = best[at + mblen];
      const double cand = unk_score + here;
      if (t.start < 0 || cand > t.score) t = {unk_id_, cand, static_cast<long>(at)};
    }
    at += mblen;
  }
  // Backtrack into (begin, end, id) pieces; consecutive unks fuse into one piece.
  struct Piece {
    size_t b, e;
    int32_t id;
  };
  std::vector<Piece> pieces;
  for (size_t end = n; end > 0;) {
    const Node& node = best[end];
    const auto b = static_cast<size_t>(node.start);
    if (node.id == unk_id_ && !pieces.empty() && pieces.back().id == unk_id_ &&
        pieces.back().b == end)
      pieces.back().b = b;
    else
      pieces.push_back({b, end, node.id});
    end = b;
  }
  std::reverse(pieces.begin(), pieces.end());
  for (const Piece& p : pieces) {
    const std::string_view text = s.substr(p.b, p.e - p.b);
    const int32_t id = find(text);  // a fused unk run may itself be an entry
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    if (byte_fallback_) {
      std::vector<int32_t> bytes;
      char spelled[7];
      for (char c : text) {
        std::snprintf(spelled, sizeof spelled, "<0x%02X>", static_cast<uint8_t>(c));
        const int32_t b = find(spelled);
        if (b < 0) break;
        bytes.push_back(b);
      }
      if (bytes.size() == text.size()) {
        out.insert(out.end(), bytes.begin(), bytes.end());
        continue;
      }
    }
    out.push_back(unk_id_);
  }
}

}  // namespace tensorpar

// The score-driven merge loop (llama.cpp's llm_tokenizer_spm). Candidate pairs sit in a max-heap
// keyed by (score, -left position) and are validated lazily when popped, as in llama.cpp.
#include "tokenizer/sentencepiece.h"

#include <queue>

namespace tensorpar {
namespace {

// llama.cpp's utf8_len: the length the lead byte announces, continuation bytes unchecked.
size_t lead_byte_len(uint8_t b) {
  static constexpr uint8_t kLen[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[b >> 4];
}

}  // namespace

void SentencePieceModel::add_token(const std::string& spelled, int32_t id, float score) {
  vocab_.emplace(spelled, id);
  if (scores_.size() <= static_cast<size_t>(id)) scores_.resize(static_cast<size_t>(id) + 1, 0.f);
  scores_[static_cast<size_t>(id)] = score;
  const int b = byte_token_value(spelled);
  if (b >= 0 && byte_token_id_[static_cast<size_t>(b)] < 0)
    byte_token_id_[static_cast<size_t>(b)] = id;
}

int32_t SentencePieceModel::find(std::string_view key) const {
  auto it = vocab_.find(key);
  return it == vocab_.end() ? -1 : it->second;
}

void SentencePieceModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  struct Sym {
    size_t start, n;  // n == 0: merged into its left neighbour
    int prev, next;
  };
  std::vector<Sym> sym;
  for (size_t i = 0; i < text.size();) {
    const size_t n = std::min(lead_byte_len(static_cast<uint8_t>(text[i])), text.size() - i);
    const int k = static_cast<int>(sym.size());
    sym.push_back({i, n, k - 1, -1});
    if (k > 0) sym[static_cast<size_t>(k - 1)].next = k;
    i += n;
  }
  struct Bigram {
    float score;
    int left, right;
    size_t size;
    bool operator<(const Bigram& o) const {  // max-heap: higher score, then smaller left
      return score < o.score || (score == o.score && left > o.left);
    }
  };
  std::priority_queue<Bigram> heap;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const Sym& a = sym[static_cast<size_t>(l)];
    const Sym& b = sym[static_cast<size_t>(r)];
    const int32_t id = find(text.substr(a.start, a.n + b.n));
    if (id >= 0) heap.push({scores_[static_cast<size_t>(id)], l, r, a.n + b.n});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(static_cast<int>(i) - 1, static_cast<int>(i));
  while (!heap.empty()) {
    const Bigram g = heap.top();
    heap.pop();
    Sym& l = sym[static_cast<size_t>(g.left)];
    Sym& r = sym[static_cast<size_t>(g.right)];
    if (l.n == 0 || r.n == 0 || l.n + r.n != g.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = g.left;
    try_add(l.prev, g.left);
    try_add(g.left, l.next);
  }
  for (int i = sym.empty() ? -1 : 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
    const Sym& s = sym[static_cast<size_t>(i)];
    const std::string_view piece = text.substr(s.start, s.n);
    const int32_t id = find(piece);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : piece) {  // byte fallback: <0xNN>, else the one-byte token, else unk
      int32_t b = byte_token_id_[static_cast<uint8_t>(c)];
      if (b < 0) b = find(std::string_view(&c, 1));
      if (b < 0) b = unk_id_;
      if (b >= 0) out.push_back(b);
    }
  }
}

}  // namespace tensorpar

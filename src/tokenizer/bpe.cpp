// Byte-level mapping, initial symbols and the BPE merge loop. The loop keeps the symbols of a piece
// in a linked list and candidate pairs in a min-heap keyed by (rank, position), validated lazily
// when popped: O(n log n) per piece, so long runs (a thousand spaces) stay cheap.
#include "tokenizer/bpe.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace tensorpar {
namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100.. in byte order, so every byte has a visible, non-space character.
struct ByteMap {
  std::array<uint32_t, 256> to_cp{};
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteMap() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      to_cp[b] = printable ? b : next++;
      to_byte[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;  // immutable table, built once
  return m;
}

}  // namespace

std::string byte_level_encode(std::string_view bytes) {
  const ByteMap& m = byte_map();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) utf8_append(out, m.to_cp[static_cast<uint8_t>(ch)]);
  return out;
}

bool byte_level_decode(std::string_view spelled, std::string* out) {
  const ByteMap& m = byte_map();
  std::string bytes;
  bytes.reserve(spelled.size());
  for (size_t i = 0; i < spelled.size();) {
    const Utf8Char c = utf8_next(spelled, i);
    if (!c.valid) return false;
    auto it = m.to_byte.find(c.cp);
    if (it == m.to_byte.end()) return false;
    bytes += static_cast<char>(it->second);
    i += static_cast<size_t>(c.len);
  }
  *out = std::move(bytes);
  return true;
}

int byte_token_value(std::string_view s) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
  };
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  const int hi = hex(s[3]), lo = hex(s[4]);
  return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void BpeModel::add_token(const std::string& key, int32_t id) {
  vocab_.emplace(key, id);
  if (key.size() == 1) {
    auto& slot = byte_id_[static_cast<uint8_t>(key[0])];
    if (slot < 0) slot = id;
  }
  if (!o_.byte_level) {
    const int b = byte_token_value(key);
    if (b >= 0 && byte_token_id_[static_cast<size_t>(b)] < 0)
      byte_token_id_[static_cast<size_t>(b)] = id;
  }
}

int32_t BpeModel::find(std::string_view key) const {
  auto it = vocab_.find(key);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::add_merge(std::string_view a, std::string_view b, int32_t rank) {
  const int32_t ia = find(a), ib = find(b);
  std::string ab(a);
  ab += b;
  const int32_t iab = find(ab);
  auto show = [&](std::string_view k) {
    return o_.byte_level ? byte_level_encode(k) : std::string(k);
  };
  TP_CHECK(ia >= 0 && ib >= 0 && iab >= 0, "[BpeModel::add_merge] merge ", rank, " ('", show(a),
           "' '", show(b),
           "'): got a part or result missing from the vocab, expected all three to be tokens");
  merges_.emplace(key(ia, ib), Merge{rank, iab});
}

// The ids before any merge (HF's BPE::merge_word). Bytes / characters without a token become
// their <0xNN> tokens (byte_fallback), else unk (fused when asked), else are dropped, as HF does
// for a BPE model without unk (some real vocabularies, e.g. SmolLM2's, lack a few control and
// never-used lead bytes).
void BpeModel::initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const {
  bool prev_unk = false;
  for (size_t i = 0; i < piece.size();) {
    size_t len = 1;
    int32_t id;
    if (o_.byte_level) {
      id = byte_id_[static_cast<uint8_t>(piece[i])];
    } else {
      len = static_cast<size_t>(utf8_next(piece, i).len);
      id = len == 1 ? byte_id_[static_cast<uint8_t>(piece[i])] : find(piece.substr(i, len));
    }
    if (id >= 0) {
      ids.push_back(id);
      prev_unk = false;
    } else {
      bool all = o_.byte_fallback;
      for (size_t k = i; all && k < i + len; ++k)
        all = byte_token_id_[static_cast<uint8_t>(piece[k])] >= 0;
      if (all) {
        for (size_t k = i; k < i + len; ++k)
          ids.push_back(byte_token_id_[static_cast<uint8_t>(piece[k])]);
        prev_unk = false;
      } else if (o_.unk_id >= 0) {
        if (!(o_.fuse_unk && prev_unk)) ids.push_back(o_.unk_id);
        prev_unk = true;
      }
    }
    i += len;
  }
}

void BpeModel::encode(std::string_view piece, std::vector<int32_t>& out) const {
  if (piece.empty()) return;
  if (o_.ignore_merges) {
    const int32_t whole = find(piece);
    if (whole >= 0) {
      out.push_back(whole);
      return;
    }
  }
  struct Sym {
    int32_t id;
    int prev, next;  // -1 at the ends
  };
  std::vector<int32_t> ids;
  ids.reserve(piece.size());
  initial_symbols(piece, ids);
  const int n = static_cast<int>(ids.size());
  if (n == 0) return;
  if (n == 1) {
    out.push_back(ids[0]);
    return;
  }
  std::vector<Sym> sym(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i)
    sym[static_cast<size_t>(i)] = {ids[static_cast<size_t>(i)], i - 1, i + 1 < n ? i + 1 : -1};
  struct Cand {
    int32_t rank;
    int pos;
    int32_t left, right, merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
  auto push = [&](int pos) {
    const int nx = sym[static_cast<size_t>(pos)].next;
    if (nx < 0) return;
    const int32_t a = sym[static_cast<size_t>(pos)].id, b = sym[static_cast<size_t>(nx)].id;
    auto it = merges_.find(key(a, b));
    if (it != merges_.end()) heap.push({it->second.rank, pos, a, b, it->second.id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Cand c = heap.top();
    heap.pop();
    Sym& s = sym[static_cast<size_t>(c.pos)];
    // Stale: the left symbol was merged away or changed, or its right neighbour changed.
    if (s.id != c.left || s.next < 0 || sym[static_cast<size_t>(s.next)].id != c.right) continue;
    const int victim = s.next;
    s.id = c.merged;
    s.next = sym[static_cast<size_t>(victim)].next;
    sym[static_cast<size_t>(victim)].id = -1;
    if (s.next >= 0) sym[static_cast<size_t>(s.next)].prev = c.pos;
    if (s.prev >= 0) push(s.prev);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next)
    out.push_back(sym[static_cast<size_t>(i)].id);
}

}  // namespace tensorpar

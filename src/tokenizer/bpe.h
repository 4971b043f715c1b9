// Byte-level BPE: the GPT-2 byte <-> printable-character mapping used to spell vocab entries, and
// the merge loop that turns one pre-tokenized piece into token ids (lowest merge rank first,
// leftmost on ties, as HF tokenizers and llama.cpp do).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tensorpar {

// Raw bytes -> their byte-level spelling (UTF-8 of the mapped characters), e.g. " a" -> "Ġa".
std::string byte_level_encode(std::string_view bytes);
// The inverse; returns false (out untouched) when a character is outside the 256-entry map.
bool byte_level_decode(std::string_view spelled, std::string* out);

class BpeModel {
 public:
  BpeModel() { byte_id_.fill(-1); }

  // Registers token id whose raw bytes are `bytes` as a BPE symbol.
  void add_token(const std::string& bytes, int32_t id);
  // Registers merge number `rank`: (a, b) -> the token spelled a+b (raw bytes). Throws Error when
  // a part or the result is not a token. A repeated pair keeps its first (lowest) rank.
  void add_merge(std::string_view a, std::string_view b, int32_t rank);
  // The id of the token with these raw bytes, or -1.
  int32_t find(std::string_view bytes) const;
  // Appends the ids of one piece. ignore_merges: a piece that is itself a token is taken whole
  // (Llama 3). Bytes that have no token are skipped, as HF tokenizers does.
  void encode(std::string_view piece, bool ignore_merges, std::vector<int32_t>& out) const;
  size_t merge_count() const { return merges_.size(); }
  // Whether byte b has a single-byte token (false for a few bytes in some vocabularies).
  bool has_byte(uint8_t b) const { return byte_id_[b] >= 0; }

 private:
  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Merge {
    int32_t rank, id;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }

  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_id_;
};

}  // namespace tensorpar

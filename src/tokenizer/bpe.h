// BPE (HF tokenizers' BPE model): the GPT-2 byte <-> printable-character mapping used to spell
// byte-level vocabularies, and the merge loop that turns one pre-tokenized piece into ids (lowest
// merge rank first, leftmost on ties, as HF tokenizers and llama.cpp do). Initial symbols are bytes
// (byte-level vocabularies, stored as raw bytes) or UTF-8 characters (SentencePiece-style
// vocabularies), with byte_fallback (<0xNN> tokens) or an unk token for characters not in the
// vocab.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/model.h"

namespace tensorpar {

// Raw bytes -> their byte-level spelling (UTF-8 of the mapped characters), e.g. " a" -> "Ġa".
std::string byte_level_encode(std::string_view bytes);
// The inverse; returns false (out untouched) when a character is outside the 256-entry map.
bool byte_level_decode(std::string_view spelled, std::string* out);
// The byte of a "<0xNN>" byte token, or -1.
int byte_token_value(std::string_view spelled);

struct BpeOptions {
  bool byte_level = true;      // symbols are bytes; else UTF-8 characters
  bool byte_fallback = false;  // a character not in the vocab becomes its <0xNN> tokens
  bool ignore_merges = false;  // a piece that is itself a token is taken whole (Llama 3)
  bool fuse_unk = false;       // consecutive unknown characters become one unk
  int32_t unk_id = -1;         // -1: unknown characters are dropped (as HF does without unk)
};

class BpeModel final : public TokenModel {
 public:
  explicit BpeModel(BpeOptions o = {}) : o_(o) {
    byte_id_.fill(-1);
    byte_token_id_.fill(-1);
  }

  // Registers token id whose key (raw bytes for byte-level, else the vocab spelling) is `key`.
  void add_token(const std::string& key, int32_t id);
  // Registers merge number `rank`: (a, b) -> the token keyed a+b. Throws Error when a part or the
  // result is not a token. A repeated pair keeps its first (lowest) rank.
  void add_merge(std::string_view a, std::string_view b, int32_t rank);
  int32_t find(std::string_view key) const override;
  void encode(std::string_view piece, std::vector<int32_t>& out) const override;
  size_t merge_count() const { return merges_.size(); }
  // Whether byte b has a single-byte token (false for a few bytes in some vocabularies).
  bool has_byte(uint8_t b) const { return byte_id_[b] >= 0 || byte_token_id_[b] >= 0; }

 private:
  struct Merge {
    int32_t rank, id;
  };
  static uint64_t key(int32_t a, int32_t b) { return (uint64_t(uint32_t(a)) << 32) | uint32_t(b); }
  void initial_symbols(std::string_view piece, std::vector<int32_t>& ids) const;

  BpeOptions o_;
  Vocab vocab_;
  std::unordered_map<uint64_t, Merge> merges_;
  std::array<int32_t, 256> byte_id_;        // single-byte keys
  std::array<int32_t, 256> byte_token_id_;  // <0xNN> tokens
};

}  // namespace tensorpar

// The interface of a tokenizer model (HF's "model"): one pre-tokenized piece in, token ids out.
// Implementations: BpeModel (merge ranks), SentencePieceModel (merge by scores, GGUF "llama"),
// UnigramModel (Viterbi over piece scores).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace tensorpar {

// Transparent string hashing, so string_view lookups need no copy.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of one piece to out.
  virtual void encode(std::string_view piece, std::vector<int32_t>& out) const = 0;
  // The id of the vocabulary entry spelled key (raw bytes for byte-level BPE), or -1.
  virtual int32_t find(std::string_view key) const = 0;
};

}  // namespace tensorpar

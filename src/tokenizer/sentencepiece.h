// SentencePiece BPE as llama.cpp runs it for GGUF files with tokenizer.ggml.model "llama" (Llama 2,
// Mistral, TinyLlama, Gemma): start from UTF-8 characters, repeatedly merge the adjacent pair whose
// concatenation is the vocabulary entry of highest score (leftmost on ties), then spell characters
// that are not entries as their <0xNN> byte tokens. The caller has already put "▁" for spaces.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"

namespace tensorpar {

class SentencePieceModel final : public TokenModel {
 public:
  SentencePieceModel() { byte_token_id_.fill(-1); }
  // Every token of the file takes part in merges, whatever its type (as in llama.cpp).
  void add_token(const std::string& spelled, int32_t id, float score);
  void set_unk(int32_t id) { unk_id_ = id; }
  int32_t find(std::string_view key) const override;
  void encode(std::string_view piece, std::vector<int32_t>& out) const override;

 private:
  Vocab vocab_;
  std::vector<float> scores_;  // by id
  std::array<int32_t, 256> byte_token_id_;
  int32_t unk_id_ = -1;
};

}  // namespace tensorpar

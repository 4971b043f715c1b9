// WordPiece (HF tokenizers' WordPiece model, BERT): each pre-tokenized word becomes the longest
// vocabulary entry that starts it, then the longest "##"-prefixed entries for the rest; a word
// with no such split, or longer than max_input_chars_per_word characters, is one unk.
#pragma once

#include <string>

#include "tokenizer/bpe.h"

namespace tensorpar {

class WordPieceModel final : public TokenModel {
 public:
  WordPieceModel(int32_t unk_id, std::string prefix, size_t max_chars)
      : unk_id_(unk_id), prefix_(std::move(prefix)), max_chars_(max_chars) {}
  void add_token(const std::string& spelled, int32_t id);
  int32_t find(std::string_view key) const override;
  void encode(std::string_view word, std::vector<int32_t>& out) const override;

 private:
  Vocab vocab_;
  int32_t unk_id_;
  std::string prefix_;
  size_t max_chars_;
};

}  // namespace tensorpar

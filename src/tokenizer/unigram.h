// Unigram (HF tokenizers' Unigram model, SentencePiece's unigram): the segmentation of a piece into
// vocabulary entries with the highest total score (Viterbi); characters without an entry score
// min_score - 10 as unk, consecutive unks fuse, and byte_fallback spells them as <0xNN> tokens.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/bpe.h"

namespace tensorpar {

class UnigramModel final : public TokenModel {
 public:
  UnigramModel(int32_t unk_id, bool byte_fallback)
      : unk_id_(unk_id), byte_fallback_(byte_fallback) {}
  void add_token(const std::string& spelled, int32_t id, double score);
  int32_t find(std::string_view key) const override;
  void encode(std::string_view piece, std::vector<int32_t>& out) const override;

 private:
  Vocab vocab_;
  std::vector<double> scores_;  // by id
  double min_score_ = 0;
  size_t max_len_ = 0;  // longest entry, bytes
  int32_t unk_id_;
  bool byte_fallback_;
};

}  // namespace tensorpar

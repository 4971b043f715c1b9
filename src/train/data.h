// Training data: text files tokenised with a real tokenizer into one token stream, split into
// train / validation (the last fraction of the stream), and batches of random contiguous windows.
// Windows are a pure function of (seed, stream, index), so a resumed run draws exactly the
// batches an uninterrupted one would, with no loader state to save.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "core/tensor.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar {

struct TokenCorpus {
  std::vector<int32_t> train, val;
};

// The files a --data path names: the file itself, or a directory's regular files (sorted by
// name) except fortune(6) index files (*.dat) and their *.u8 duplicates.
std::vector<std::string> list_text_files(const std::string& path);

// Reads and tokenises every file (one document each, joined by "\n\n"); the last val_fraction of
// the tokens become validation. Throws Error when the text is too short for windows of seq + 1.
TokenCorpus tokenize_corpus(const std::vector<std::string>& files, const Tokenizer& tokenizer,
                            double val_fraction, int64_t seq);

// Rank root's corpus copied to every rank of comm (the others pass an empty one). Collective.
void broadcast_corpus(TokenCorpus& corpus, Communicator& comm, int root = 0);

// Fills tokens and targets (B, T) i64 with B windows of data: row b starts at a position drawn
// from (seed, stream, index, b); targets are the tokens shifted by one.
void sample_windows(Tensor& tokens, Tensor& targets, std::span<const int32_t> data, int64_t B,
                    int64_t T, uint64_t seed, uint64_t stream, uint64_t index);

}  // namespace tensorpar

// A GGUF vocabulary (tokenizer.ggml.*) written as Hugging Face tokenizer files, so an export of a
// run that started from a GGUF is self-contained. The tokenizer.json encodes and decodes as
// Tokenizer::from_gguf does, both in Tokenizer::from_json_file and in HF `tokenizers`:
//
// - model "gpt2" (byte-level BPE): BPE with the file's vocab and merges (written as [a, b] pairs,
//   so tokens with spaces survive); pre_tokenizer Sequence[(Digits individual, for smollm),
//   Split(the regex of tokenizer.ggml.pre, Isolated), ByteLevel(add_prefix_space false,
//   use_regex false)]; ignore_merges as pre_tokenizer_from_gguf_name says (llama-bpe); decoder
//   ByteLevel; post_processor ByteLevel, or TemplateProcessing "bos $A" when add_bos.
// - model "llama" (SentencePiece, as Llama 2 and Gemma 3): normalizer Replace(" " -> "▁"), then
//   Prepend("▁") when add_space_prefix; no pre-tokenizer; BPE with byte_fallback whose merges are
//   every split a + b of a token where a and b are tokens too (byte tokens excepted), ranked by the
//   token's score, highest first, then by the ids of the token, a and b (HF's SentencePiece
//   converter): rank order stands in for SentencePiece's "highest score, leftmost" loop. Decoder
//   Sequence[Replace("▁" -> " "), ByteFallback, Fuse, Strip(1 leading space) when
//   add_space_prefix]; post_processor TemplateProcessing "bos $A" when add_bos.
// - Both: every token is in model.vocab under its GGUF spelling and id (HF renumbers added tokens
//   that are not); control and unknown tokens are also added tokens with special true,
//   user-defined ones with special false (matched in the text, as llama.cpp does); all added
//   tokens have normalized false (matched in the raw text, as Tokenizer does).
//
// Not expressible, refused with Error: other tokenizer.ggml.model types (bert, t5, rwkv, ...), an
// unknown pre-tokenizer name, empty or repeated token spellings (tokenizer.json's vocab is a map),
// a SentencePiece vocabulary without scores (its merges would have no order).
//
// Known differences from Tokenizer::from_gguf, where tokenizer.json cannot say what llama.cpp does
// (tests: tests/tokenizer/tokenizer_json_writer_test.cpp, check_written_tokenizer_json.py):
// - invalid UTF-8 input is split into maximal subparts, where llama.cpp's SentencePiece takes the
//   length a lead byte announces (Gemma 3: 18 of the fixtures' 43 invalid texts keep their ids);
// - a run of <0xNN> tokens that is not UTF-8 decodes to one U+FFFD per byte (ByteFallback), where
//   the GGUF tokenizer joins the raw bytes and repairs the text once;
// - seen on no test text: SentencePiece merges a character that has no token with its neighbours
//   (HF falls back to bytes first), spells a byte without <0xNN> token as unk per byte (HF per
//   character), and breaks a tie between two different equal-score pairs by position (HF by rank);
//   a gpt2 vocabulary's unused/byte-typed tokens, which from_gguf never produces, are in
//   model.vocab (a merge, a single byte or ignore_merges could reach them); added tokens' text
//   passes through HF's decoder (ByteLevel / Replace "▁"), where Tokenizer keeps it verbatim.
#pragma once

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string_view>

#include "tokenizer/tokenizer.h"

namespace tensorpar {

// The tokenizer.json of a GGUF vocabulary (see above). Throws Error for one it cannot express.
nlohmann::json hf_tokenizer_json(const GgufVocab& vocab);

// The tokenizer_config.json beside it: bos/eos/unk tokens, add_bos_token, add_eos_token false,
// tokenizer_class PreTrainedTokenizerFast, and the chat template when not empty (a GGUF's
// tokenizer.chat_template). Without it, loaders guess eos from the token names.
nlohmann::json hf_tokenizer_config_json(const GgufVocab& vocab,
                                        std::string_view chat_template = {});

// Writes dir/tokenizer.json and dir/tokenizer_config.json (dir must exist). Throws Error naming
// the file when it cannot be written.
void write_hf_tokenizer_files(const GgufVocab& vocab, const std::filesystem::path& dir,
                              std::string_view chat_template = {});

}  // namespace tensorpar

// The tokenizer: HF tokenizers' pipeline (added tokens, normalizer, pre-tokenizer, model: BPE,
// SentencePiece BPE by scores, Unigram; decoder) loaded from an HF tokenizer.json or from the
// tokenizer.ggml.* metadata of a GGUF file (model "gpt2": byte-level BPE; "llama": SentencePiece).
// Added/special tokens are matched in the text before normalization; decode returns valid UTF-8.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/model.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace tensorpar {

// GGUF tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class GgufTokenType : int32_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6
};

// The tokenizer.ggml.* metadata of a GGUF file.
struct GgufVocab {
  std::string model = "gpt2";   // tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SPM)
  std::string pre = "default";  // tokenizer.ggml.pre (byte-level BPE only)
  std::vector<std::string> tokens;
  std::vector<std::string> merges;   // "a b", byte-level BPE
  std::vector<float> scores;         // SentencePiece; empty: all 0
  std::vector<int32_t> token_types;  // GgufTokenType values; empty: all normal
  int32_t bos_id = -1, eos_id = -1, unk_id = -1;
  bool add_bos = false;
  bool add_space_prefix = true;  // SentencePiece: a "▁" before the text (and after special tokens)
};

class Tokenizer {
 public:
  // An HF tokenizer.json. A tokenizer_config.json beside it, when present, supplies bos/eos,
  // add_bos_token and the chat template. Throws Error on unreadable or unsupported files.
  static Tokenizer from_json_file(const std::string& path);
  // The same from strings; config_json may be empty.
  static Tokenizer from_json_string(std::string_view tokenizer_json,
                                    std::string_view config_json = {});
  // GGUF metadata. Control tokens are special; user-defined ones are added (matched in the text,
  // as llama.cpp does). Throws Error for an unknown model or pre-tokenizer, or bad lists.
  static Tokenizer from_gguf(const GgufVocab& vocab);
  // A byte-level BPE GGUF vocabulary from its lists (model "gpt2"): tokenizer.ggml.{tokens, merges,
  // token_type, bos_token_id, eos_token_id, pre, add_bos_token}. token_types may be empty.
  static Tokenizer from_gguf_vocab(const std::vector<std::string>& tokens,
                                   const std::vector<std::string>& merges,
                                   const std::vector<int32_t>& token_types, int32_t bos_id,
                                   int32_t eos_id, std::string_view pre, bool add_bos = false);

  // Text -> ids. allow_special: special tokens written in the text (e.g. "<|im_start|>") become
  // their ids, as HF does by default; otherwise they are encoded as plain text. No BOS is added:
  // prepend bos_id() when add_bos() says so.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = true) const;
  // Ids -> valid UTF-8 (special tokens included as their text). Throws Error naming a bad id.
  std::string decode(std::span<const int32_t> ids) const;
  // The raw bytes of one token (may be a partial UTF-8 character). Throws Error for a bad id.
  const std::string& token_bytes(int32_t id) const;
  // The vocab spelling of one token ("Ġthe"; special tokens as written).
  std::string token_text(int32_t id) const;
  // The id of a token given its vocab spelling, or -1.
  int32_t token_id(std::string_view spelled) const;

  int32_t vocab_size() const { return static_cast<int32_t>(bytes_.size()); }
  int32_t bos_id() const { return bos_id_; }  // -1 when the model has none
  int32_t eos_id() const { return eos_id_; }
  bool add_bos() const { return add_bos_; }
  // eos_id() and the end-of-turn tokens present in the vocab (<|im_end|>, <|eot_id|>, ...).
  bool is_eos(int32_t id) const;
  bool is_special(int32_t id) const;
  // Whether byte b has a token of its own (a byte-level one or <0xNN>). Byte-level BPE drops
  // bytes that have none, as HF tokenizers does (a few real vocabularies, SmolLM2's among them,
  // lack some control and unused lead bytes).
  bool can_encode_byte(uint8_t b) const { return byte_known_[b]; }
  // The tokenizer's normalizer applied to text (the identity when it has none).
  std::string normalize(std::string_view text) const { return normalizer_.apply(text); }
  // The chat template from tokenizer_config.json (empty when none was found).
  const std::string& chat_template() const { return chat_template_; }

 private:
  friend class StreamDecoder;
  enum class Kind : uint8_t { kAbsent, kNormal, kSpecial, kAdded };
  struct Added {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip;
  };

  Tokenizer() = default;
  // Registers a vocabulary entry: its spelling in the file and the bytes it decodes to.
  void set_token(int32_t id, std::string spelled, std::string bytes, Kind kind);
  void add_added(Added a);
  void finish(const char* where);  // checks ids, picks eos set, indexes added tokens
  void encode_text(std::string_view text, bool first, std::vector<int32_t>& out) const;
  const Added* match_added(std::string_view text, size_t at, bool allow_special) const;

  Normalizer normalizer_;
  PreTokenizer pre_tokenizer_;
  std::shared_ptr<const TokenModel> model_;
  bool byte_level_ = true;  // vocab keys are raw bytes spelled with the byte-level map
  // Decoding: bytes_[id] is the piece of one token (byte-level map undone, "▁" -> " ", <0xNN> ->
  // the byte); then one leading space of the whole text is dropped (Metaspace / Strip decoders),
  // and invalid runs of <0xNN> tokens become one U+FFFD per byte (HF's ByteFallback decoder).
  bool strip_leading_space_ = false;
  bool byte_fallback_decode_ = false;
  std::string wordpiece_prefix_;      // WordPiece decoder: a first token keeps this prefix ("##")
  std::vector<std::string> spelled_;  // per id: the vocab spelling
  std::vector<std::string> bytes_;    // per id: decoded bytes (content for added tokens)
  std::vector<Kind> kind_;
  std::vector<uint8_t> is_byte_token_;  // per id: a <0xNN> token
  std::array<bool, 256> byte_known_{};
  std::vector<Added> added_;
  // Added tokens by content, and their distinct lengths longest first: at each position the
  // longest match wins.
  std::unordered_map<std::string, size_t, StringHash, std::equal_to<>> added_index_;
  std::vector<size_t> added_lengths_;
  std::array<bool, 256> added_first_{};  // bytes that start some added token
  std::vector<int32_t> eos_ids_;
  int32_t bos_id_ = -1, eos_id_ = -1;
  bool add_bos_ = false;
  std::string chat_template_;
};

// Turns ids into text as they arrive, holding back the bytes of an incomplete UTF-8 character
// so no chunk ends in a broken one. Concatenated chunks + flush() == Tokenizer::decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tok) : tok_(&tok) {}
  // The text that became complete with this token (may be empty).
  std::string push(int32_t id);
  // Whatever is held back, as U+FFFD for an unfinished character; resets the decoder.
  std::string flush();

 private:
  const Tokenizer* tok_;
  std::string pending_;
  bool started_ = false;  // some text was emitted (the leading space is dropped only before)
  bool first_token_ = true;  // no token pushed since construction or flush (WordPiece's prefix rule)
};

}  // namespace tensorpar

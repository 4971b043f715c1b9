// Byte-level BPE tokenizer (GPT-2, Llama 3, Qwen2, SmolLM2 families), loaded from an HF
// tokenizer.json or from the vocabulary lists of a GGUF file. Added/special tokens are matched in
// the text before pre-tokenization; decode returns valid UTF-8 (invalid byte runs -> U+FFFD).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/bpe.h"
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

class Tokenizer {
 public:
  // An HF tokenizer.json. A tokenizer_config.json beside it, when present, supplies bos/eos,
  // add_bos_token and the chat template. Throws Error on unreadable or unsupported files.
  static Tokenizer from_json_file(const std::string& path);
  // The same from strings; config_json may be empty.
  static Tokenizer from_json_string(std::string_view tokenizer_json,
                                    std::string_view config_json = {});
  // GGUF metadata: tokenizer.ggml.{tokens, merges ("a b"), token_type, bos_token_id,
  // eos_token_id, pre, add_bos_token}. token_types may be empty (all normal); ids may be -1.
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
  // Whether byte b has a token. encode() drops bytes that have none, as HF tokenizers does (a few
  // real vocabularies, SmolLM2's among them, lack some control and unused lead bytes).
  bool can_encode_byte(uint8_t b) const { return bpe_.has_byte(b); }
  PreTokenizer pre_tokenizer() const { return pre_; }
  // Whether encode() NFC-normalizes text first (then decode(encode(s)) == NFC(s), not s).
  bool normalizes_nfc() const { return nfc_; }
  // The chat template from tokenizer_config.json (empty when none was found).
  const std::string& chat_template() const { return chat_template_; }

 private:
  enum class Kind : uint8_t { kAbsent, kNormal, kSpecial, kAdded };
  struct Added {
    std::string content;
    int32_t id;
    bool special, lstrip, rstrip;
  };

  Tokenizer() = default;
  void set_token(int32_t id, std::string bytes, Kind kind);
  void add_added(Added a);
  void finish(const char* where);  // checks ids, picks eos set, sorts added tokens
  void encode_text(std::string_view text, std::vector<int32_t>& out) const;

  BpeModel bpe_;
  PreTokenizer pre_ = PreTokenizer::kGpt2;
  bool ignore_merges_ = false;
  bool nfc_ = false;                // the tokenizer.json asks for NFC normalization (Qwen2)
  std::vector<std::string> bytes_;  // per id: raw bytes (BPE tokens) or content (added tokens)
  std::vector<Kind> kind_;
  std::vector<Added> added_;             // longest content first, so the first match is the longest
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
};

}  // namespace tensorpar

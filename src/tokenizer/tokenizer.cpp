// Tokenizer core: added-token matching, encode/decode, streaming decode, and the GGUF loader
// (the JSON loader is in tokenizer_json.cpp). Both loaders fill the same private tables.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/nfc.h"
#include "tokenizer/unicode.h"

namespace tensorpar {
namespace {

// End-of-turn / end-of-text markers a generation loop should stop on, besides eos.
constexpr std::string_view kStopTokens[] = {"<|im_end|>",      "<|eot_id|>",    "<|eom_id|>",
                                            "<|end_of_text|>", "<|endoftext|>", "</s>",
                                            "<|end|>"};

// Byte offset where the run of whitespace characters that ends at `end` begins (>= begin).
size_t whitespace_run_start(std::string_view s, size_t begin, size_t end) {
  size_t start = begin;
  for (size_t i = begin; i < end;) {
    const Utf8Char c = utf8_next(s, i);
    i += static_cast<size_t>(c.len);
    if (!(c.valid && is_whitespace(c.cp))) start = i;
  }
  return start;
}

size_t whitespace_run_end(std::string_view s, size_t begin) {
  size_t i = begin;
  while (i < s.size()) {
    const Utf8Char c = utf8_next(s, i);
    if (!(c.valid && is_whitespace(c.cp))) break;
    i += static_cast<size_t>(c.len);
  }
  return i;
}

}  // namespace

void Tokenizer::set_token(int32_t id, std::string bytes, Kind kind) {
  TP_CHECK(id >= 0 && id < (1 << 30), "[Tokenizer] token id: got ", id,
           ", expected 0 <= id < 2^30");
  const auto i = static_cast<size_t>(id);
  if (i >= bytes_.size()) {
    bytes_.resize(i + 1);
    kind_.resize(i + 1, Kind::kAbsent);
  }
  bytes_[i] = std::move(bytes);
  kind_[i] = kind;
}

void Tokenizer::add_added(Added a) {
  TP_CHECK(!a.content.empty(), "[Tokenizer] added token ", a.id,
           ": got empty content, expected text");
  set_token(a.id, a.content, a.special ? Kind::kSpecial : Kind::kAdded);
  added_.push_back(std::move(a));
}

void Tokenizer::finish(const char* where) {
  TP_CHECK(!bytes_.empty(), "[", where, "] empty vocabulary: got 0 tokens, expected at least 256");
  // Longest content first, so the first match at a position is the longest one.
  std::stable_sort(added_.begin(), added_.end(), [](const Added& a, const Added& b) {
    return a.content.size() > b.content.size();
  });
  for (int32_t id : {bos_id_, eos_id_})
    TP_CHECK(id < vocab_size(), "[", where, "] bos/eos id: got ", id, ", expected < vocab size ",
             vocab_size());
  for (const Added& a : added_) added_first_[static_cast<uint8_t>(a.content[0])] = true;
  if (eos_id_ >= 0) eos_ids_.push_back(eos_id_);
  for (const Added& a : added_)
    for (std::string_view stop : kStopTokens)
      if (a.special && a.content == stop && a.id != eos_id_) eos_ids_.push_back(a.id);
}

bool Tokenizer::is_eos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && kind_[static_cast<size_t>(id)] == Kind::kSpecial;
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
  std::string normalized;
  if (nfc_) {
    normalized = nfc_normalize(text);
    text = normalized;
  }
  std::vector<std::string_view> pieces;
  pre_tokenize(pre_, text, pieces);
  for (std::string_view p : pieces) bpe_.encode(p, ignore_merges_, out);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  size_t done = 0;  // text before this offset is encoded
  for (size_t i = 0; i < text.size(); ++i) {
    if (!added_first_[static_cast<uint8_t>(text[i])]) continue;
    const Added* hit = nullptr;
    for (const Added& a : added_) {  // longest first
      if ((a.special && !allow_special) || a.content[0] != text[i]) continue;
      if (text.compare(i, a.content.size(), a.content) == 0) {
        hit = &a;
        break;
      }
    }
    if (hit == nullptr) continue;
    const size_t begin = hit->lstrip ? whitespace_run_start(text, done, i) : i;
    encode_text(text.substr(done, begin - done), out);
    out.push_back(hit->id);
    done = i + hit->content.size();
    if (hit->rstrip) done = whitespace_run_end(text, done);
    i = done - 1;
  }
  encode_text(text.substr(done), out);
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  TP_CHECK(id >= 0 && id < vocab_size() && kind_[static_cast<size_t>(id)] != Kind::kAbsent,
           "[Tokenizer::token_bytes] token id ", id,
           ": got an id that is not a token, expected 0 <= id < ", vocab_size());
  return bytes_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string raw;
  for (int32_t id : ids) raw += token_bytes(id);
  return utf8_lossy(raw);
}

std::string Tokenizer::token_text(int32_t id) const {
  const std::string& b = token_bytes(id);
  return kind_[static_cast<size_t>(id)] == Kind::kNormal && bpe_.find(b) == id
             ? byte_level_encode(b)
             : b;
}

int32_t Tokenizer::token_id(std::string_view spelled) const {
  for (const Added& a : added_)
    if (a.content == spelled) return a.id;
  std::string raw;
  return byte_level_decode(spelled, &raw) ? bpe_.find(raw) : -1;
}

Tokenizer Tokenizer::from_gguf_vocab(const std::vector<std::string>& tokens,
                                     const std::vector<std::string>& merges,
                                     const std::vector<int32_t>& token_types, int32_t bos_id,
                                     int32_t eos_id, std::string_view pre, bool add_bos) {
  const char* where = "Tokenizer::from_gguf_vocab";
  TP_CHECK(token_types.empty() || token_types.size() == tokens.size(), "[", where,
           "] token_type count: got ", token_types.size(), ", expected ", tokens.size(),
           " (one per token)");
  Tokenizer t;
  t.pre_ = pre_tokenizer_from_name(pre);
  t.ignore_merges_ = t.pre_ == PreTokenizer::kLlama3;  // as in Llama 3's tokenizer.json
  t.bytes_.reserve(tokens.size());
  t.kind_.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto id = static_cast<int32_t>(i);
    const int32_t type = token_types.empty() ? 1 : token_types[i];
    TP_CHECK(type >= 1 && type <= 6, "[", where, "] token ", id, " type: got ", type,
             ", expected 1..6");
    if (type == int32_t(GgufTokenType::kControl) || type == int32_t(GgufTokenType::kUserDefined)) {
      t.add_added({tokens[i], id, type == int32_t(GgufTokenType::kControl), false, false});
      continue;
    }
    std::string raw;
    if (!byte_level_decode(tokens[i], &raw))
      raw = tokens[i];  // not byte-level: kept verbatim
    else if (type == int32_t(GgufTokenType::kNormal))
      t.bpe_.add_token(raw, id);
    t.set_token(id, std::move(raw), Kind::kNormal);
  }
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string& m = merges[r];
    const size_t sp = m.find(' ', 1);
    TP_CHECK(sp != std::string::npos && sp + 1 < m.size(), "[", where, "] merge ", r, ": got '", m,
             "', expected two tokens separated by a space");
    std::string a, b;
    TP_CHECK(byte_level_decode(std::string_view(m).substr(0, sp), &a) &&
                 byte_level_decode(std::string_view(m).substr(sp + 1), &b),
             "[", where, "] merge ", r, ": got '", m, "', expected byte-level spelled tokens");
    t.bpe_.add_merge(a, b, static_cast<int32_t>(r));
  }
  t.bos_id_ = bos_id;
  t.eos_id_ = eos_id;
  t.add_bos_ = add_bos && bos_id >= 0;
  t.finish(where);
  return t;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_->token_bytes(id);
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  return out;
}

}  // namespace tensorpar

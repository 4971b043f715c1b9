// Tokenizer core: added-token matching, encode/decode and streaming decode. The loaders
// (tokenizer_json.cpp, tokenizer_gguf.cpp) fill the same private tables.
#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <functional>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/unicode.h"

namespace tensorpar {
namespace {

// End-of-turn / end-of-text markers a generation loop should stop on, besides eos.
constexpr std::string_view kStopTokens[] = {"<|im_end|>",      "<|eot_id|>",    "<|eom_id|>",
                                            "<|end_of_text|>", "<|endoftext|>", "</s>",
                                            "<|end|>",         "<end_of_turn>", "<eos>"};

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

void Tokenizer::set_token(int32_t id, std::string spelled, std::string bytes, Kind kind) {
  TP_CHECK(id >= 0 && id < (1 << 30), "[Tokenizer] token id: got ", id,
           ", expected 0 <= id < 2^30");
  const auto i = static_cast<size_t>(id);
  if (i >= bytes_.size()) {
    bytes_.resize(i + 1);
    spelled_.resize(i + 1);
    kind_.resize(i + 1, Kind::kAbsent);
    is_byte_token_.resize(i + 1, 0);
  }
  const int b = kind == Kind::kNormal && !byte_level_ ? byte_token_value(spelled) : -1;
  is_byte_token_[i] = b >= 0;
  if (b >= 0) byte_known_[static_cast<size_t>(b)] = true;
  if (kind == Kind::kNormal && byte_level_ && bytes.size() == 1)
    byte_known_[static_cast<uint8_t>(bytes[0])] = true;
  bytes_[i] = std::move(bytes);
  spelled_[i] = std::move(spelled);
  kind_[i] = kind;
}

void Tokenizer::add_added(Added a) {
  TP_CHECK(!a.content.empty(), "[Tokenizer] added token ", a.id,
           ": got empty content, expected text");
  set_token(a.id, a.content, a.content, a.special ? Kind::kSpecial : Kind::kAdded);
  added_first_[static_cast<uint8_t>(a.content[0])] = true;
  added_index_.emplace(a.content, added_.size());  // a repeated content keeps its first entry
  const auto at = std::lower_bound(added_lengths_.begin(), added_lengths_.end(), a.content.size(),
                                   std::greater<>());
  if (at == added_lengths_.end() || *at != a.content.size())
    added_lengths_.insert(at, a.content.size());
  added_.push_back(std::move(a));
}

void Tokenizer::finish(const char* where) {
  TP_CHECK(!bytes_.empty(), "[", where, "] empty vocabulary: got 0 tokens, expected at least 256");
  TP_CHECK(model_ != nullptr, "[", where, "] no model");
  for (int32_t id : {bos_id_, eos_id_})
    TP_CHECK(id < vocab_size(), "[", where, "] bos/eos id: got ", id, ", expected < vocab size ",
             vocab_size());
  if (eos_id_ >= 0) eos_ids_.push_back(eos_id_);
  for (const Added& a : added_)
    for (std::string_view stop : kStopTokens)
      if (a.special && a.content == stop && a.id != eos_id_ &&
          std::find(eos_ids_.begin(), eos_ids_.end(), a.id) == eos_ids_.end())
        eos_ids_.push_back(a.id);
}

bool Tokenizer::is_eos(int32_t id) const {
  return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end();
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && kind_[static_cast<size_t>(id)] == Kind::kSpecial;
}

void Tokenizer::encode_text(std::string_view text, bool first, std::vector<int32_t>& out) const {
  if (text.empty()) return;
  const std::string normalized = normalizer_.apply(text);
  std::vector<std::string> pieces;
  pre_tokenizer_.split(normalized, first, pieces);
  if (pre_tokenizer_.empty() && pieces.empty() && !normalized.empty()) pieces.push_back(normalized);
  for (const std::string& p : pieces) model_->encode(p, out);
}

const Tokenizer::Added* Tokenizer::match_added(std::string_view text, size_t at,
                                               bool allow_special) const {
  for (size_t len : added_lengths_) {  // longest first
    if (len > text.size() - at) continue;
    auto it = added_index_.find(text.substr(at, len));
    if (it == added_index_.end()) continue;
    const Added& a = added_[it->second];
    if (a.special && !allow_special) continue;
    return &a;
  }
  return nullptr;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 1);
  size_t done = 0;  // text before this offset is encoded
  for (size_t i = 0; i < text.size(); ++i) {
    if (!added_first_[static_cast<uint8_t>(text[i])]) continue;
    const Added* hit = match_added(text, i, allow_special);
    if (hit == nullptr) continue;
    const size_t begin = hit->lstrip ? whitespace_run_start(text, done, i) : i;
    encode_text(text.substr(done, begin - done), done == 0, out);
    out.push_back(hit->id);
    done = i + hit->content.size();
    if (hit->rstrip) done = whitespace_run_end(text, done);
    i = done - 1;
  }
  encode_text(text.substr(done), done == 0, out);
  return out;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
  TP_CHECK(id >= 0 && id < vocab_size() && kind_[static_cast<size_t>(id)] != Kind::kAbsent,
           "[Tokenizer::token_bytes] token id ", id,
           ": got an id that is not a token, expected 0 <= id < ", vocab_size());
  return bytes_[static_cast<size_t>(id)];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string out;
  std::string byte_run;  // consecutive <0xNN> tokens (ByteFallback decoding)
  auto flush_bytes = [&] {
    if (byte_run.empty()) return;
    if (utf8_lossy(byte_run) == byte_run) {
      out += byte_run;
    } else {
      for (size_t k = 0; k < byte_run.size(); ++k) out += "\xEF\xBF\xBD";
    }
    byte_run.clear();
  };
  for (int32_t id : ids) {
    const std::string& b = token_bytes(id);
    if (byte_fallback_decode_ && is_byte_token_[static_cast<size_t>(id)]) {
      byte_run += b;
      continue;
    }
    flush_bytes();
    out += b;
  }
  flush_bytes();
  if (strip_leading_space_ && !out.empty() && out[0] == ' ') out.erase(0, 1);
  if (!wordpiece_prefix_.empty() && !ids.empty() &&
      kind_[static_cast<size_t>(ids[0])] == Kind::kNormal &&
      spelled_[static_cast<size_t>(ids[0])].starts_with(wordpiece_prefix_))
    out.insert(0, wordpiece_prefix_);
  return utf8_lossy(out);
}

std::string Tokenizer::token_text(int32_t id) const {
  (void)token_bytes(id);  // checks id
  return spelled_[static_cast<size_t>(id)];
}

int32_t Tokenizer::token_id(std::string_view spelled) const {
  auto it = added_index_.find(spelled);
  if (it != added_index_.end()) return added_[it->second].id;
  if (!byte_level_) return model_->find(spelled);
  std::string raw;
  return byte_level_decode(spelled, &raw) ? model_->find(raw) : -1;
}

std::string StreamDecoder::push(int32_t id) {
  pending_ += tok_->token_bytes(id);
  if (!started_ && tok_->strip_leading_space_ && !pending_.empty()) {
    if (pending_[0] == ' ') pending_.erase(0, 1);
    started_ = true;
  }
  // As decode: a first WordPiece token spelled with the continuation prefix keeps it.
  if (first_token_ && !tok_->wordpiece_prefix_.empty() && tok_->kind_[static_cast<size_t>(id)] == Tokenizer::Kind::kNormal &&
      tok_->spelled_[static_cast<size_t>(id)].starts_with(tok_->wordpiece_prefix_))
    pending_.insert(0, tok_->wordpiece_prefix_);
  first_token_ = false;
  const size_t keep = utf8_incomplete_tail(pending_);
  std::string out = utf8_lossy(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StreamDecoder::flush() {
  std::string out = utf8_lossy(pending_);
  pending_.clear();
  started_ = false;
  first_token_ = true;
  return out;
}

}  // namespace tensorpar

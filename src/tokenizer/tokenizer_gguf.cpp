// Loading the tokenizer.ggml.* metadata of a GGUF file the way llama.cpp reads it: model "gpt2"
// (byte-level BPE, merges by rank, a pre-tokenizer chosen by tokenizer.ggml.pre) or "llama"
// (SentencePiece: merges by score, <0xNN> byte tokens, spaces as "▁", optional space prefix).
#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/sentencepiece.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar {
namespace {

constexpr const char* kWhere = "Tokenizer::from_gguf";
constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁

std::string unescape_spaces(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.compare(i, kSpace.size(), kSpace) == 0) {
      out += ' ';
      i += kSpace.size() - 1;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const GgufVocab& v) {
  const size_t n = v.tokens.size();
  TP_CHECK(v.token_types.empty() || v.token_types.size() == n, "[", kWhere,
           "] token_type count: got ", v.token_types.size(), ", expected ", n, " (one per token)");
  TP_CHECK(v.scores.empty() || v.scores.size() == n, "[", kWhere, "] scores count: got ",
           v.scores.size(), ", expected ", n, " (one per token)");
  TP_CHECK(v.model == "gpt2" || v.model == "llama", "[", kWhere, "] tokenizer.ggml.model: got '",
           v.model, "', expected 'gpt2' (byte-level BPE) or 'llama' (SentencePiece)");
  Tokenizer t;
  const bool spm = v.model == "llama";
  t.byte_level_ = !spm;
  std::shared_ptr<BpeModel> bpe;
  std::shared_ptr<SentencePieceModel> sp;
  if (spm) {
    sp = std::make_shared<SentencePieceModel>();
    sp->set_unk(v.unk_id);
    // llama.cpp: " " -> "▁" everywhere, and a "▁" before each stretch of text that starts the
    // input or follows a special token, when add_space_prefix.
    t.normalizer_.add({NormalizerStep::Kind::kReplace, Regex(" "), std::string(kSpace)});
    if (v.add_space_prefix)
      t.normalizer_.add({NormalizerStep::Kind::kPrepend, std::nullopt, std::string(kSpace)});
    t.strip_leading_space_ = v.add_space_prefix;
  } else {
    bool ignore_merges = false;
    t.pre_tokenizer_ = pre_tokenizer_from_gguf_name(v.pre, &ignore_merges);
    BpeOptions o;
    o.ignore_merges = ignore_merges;
    bpe = std::make_shared<BpeModel>(o);
  }
  t.bytes_.reserve(n);
  t.spelled_.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const int32_t type = v.token_types.empty() ? 1 : v.token_types[i];
    TP_CHECK(type >= 1 && type <= 6, "[", kWhere, "] token ", id, " type: got ", type,
             ", expected 1..6");
    const std::string& tok = v.tokens[i];
    if (spm) sp->add_token(tok, id, v.scores.empty() ? 0.f : v.scores[i]);
    // As llama.cpp: control and unknown tokens are special (matched in the text only when special
    // tokens are allowed), user-defined ones always.
    const bool special =
        type == int32_t(GgufTokenType::kControl) || type == int32_t(GgufTokenType::kUnknown);
    if (special || type == int32_t(GgufTokenType::kUserDefined)) {
      if (!tok.empty())
        t.add_added({tok, id, special, false, false});
      else
        t.set_token(id, tok, tok, Kind::kSpecial);
      continue;
    }
    if (spm) {
      const int b = byte_token_value(tok);
      t.set_token(id, tok, b >= 0 ? std::string(1, static_cast<char>(b)) : unescape_spaces(tok),
                  Kind::kNormal);
      continue;
    }
    std::string raw;
    if (!byte_level_decode(tok, &raw))
      raw = tok;  // not byte-level: kept verbatim
    else if (type == int32_t(GgufTokenType::kNormal))
      bpe->add_token(raw, id);
    t.set_token(id, tok, std::move(raw), Kind::kNormal);
  }
  for (size_t r = 0; !spm && r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    const size_t sp_at = m.find(' ', 1);
    TP_CHECK(sp_at != std::string::npos && sp_at + 1 < m.size(), "[", kWhere, "] merge ", r,
             ": got '", m, "', expected two tokens separated by a space");
    std::string a, b;
    TP_CHECK(byte_level_decode(std::string_view(m).substr(0, sp_at), &a) &&
                 byte_level_decode(std::string_view(m).substr(sp_at + 1), &b),
             "[", kWhere, "] merge ", r, ": got '", m, "', expected byte-level spelled tokens");
    bpe->add_merge(a, b, static_cast<int32_t>(r));
  }
  if (spm)
    t.model_ = sp;
  else
    t.model_ = bpe;
  t.bos_id_ = v.bos_id;
  t.eos_id_ = v.eos_id;
  t.add_bos_ = v.add_bos && v.bos_id >= 0;
  t.finish(kWhere);
  return t;
}

Tokenizer Tokenizer::from_gguf_vocab(const std::vector<std::string>& tokens,
                                     const std::vector<std::string>& merges,
                                     const std::vector<int32_t>& token_types, int32_t bos_id,
                                     int32_t eos_id, std::string_view pre, bool add_bos) {
  GgufVocab v;
  v.tokens = tokens;
  v.merges = merges;
  v.token_types = token_types;
  v.bos_id = bos_id;
  v.eos_id = eos_id;
  v.pre = std::string(pre);
  v.add_bos = add_bos;
  return from_gguf(v);
}

}  // namespace tensorpar

// Writing a GGUF vocabulary as HF tokenizer.json + tokenizer_config.json (the conventions are in
// tokenizer_json_writer.h). Everything is a fixed layout per tokenizer.ggml.model and .pre except
// the SentencePiece merges, which are derived from the vocabulary and its scores.
#include "tokenizer/tokenizer_json_writer.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <tuple>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace tensorpar {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "hf_tokenizer_json";
constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁, SentencePiece's space

int32_t token_type(const GgufVocab& v, size_t i) {
  return v.token_types.empty() ? int32_t(GgufTokenType::kNormal) : v.token_types[i];
}

bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const Utf8Char c = utf8_next(s, i);
    if (!c.valid) return false;
    i += static_cast<size_t>(c.len);
  }
  return true;
}

void check_special_ids(const GgufVocab& v) {
  for (int32_t id : {v.bos_id, v.eos_id, v.unk_id})
    TP_CHECK(id < static_cast<int32_t>(v.tokens.size()), "[", kWhere, "] bos/eos/unk id: got ", id,
             ", expected < vocab size ", v.tokens.size());
}

// What a tokenizer.json needs beyond what from_gguf checks: tokenizer.json's vocab is a map from
// spelling to id, so every token needs a spelling of its own, and JSON strings are UTF-8. Returns
// the id of each spelling.
std::unordered_map<std::string_view, int32_t> check_vocab(const GgufVocab& v) {
  TP_CHECK(v.model == "gpt2" || v.model == "llama", "[", kWhere, "] tokenizer.ggml.model: got '",
           v.model,
           "', expected 'gpt2' (byte-level BPE) or 'llama' (SentencePiece); no tokenizer.json "
           "layout is written for another type");
  const size_t n = v.tokens.size();
  TP_CHECK(n > 0, "[", kWhere, "] empty vocabulary: got 0 tokens");
  TP_CHECK(v.token_types.empty() || v.token_types.size() == n, "[", kWhere,
           "] token_type count: got ", v.token_types.size(), ", expected ", n, " (one per token)");
  TP_CHECK(v.scores.empty() || v.scores.size() == n, "[", kWhere, "] scores count: got ",
           v.scores.size(), ", expected ", n, " (one per token)");
  check_special_ids(v);
  std::unordered_map<std::string_view, int32_t> ids;
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string& tok = v.tokens[i];
    TP_CHECK(!tok.empty(), "[", kWhere, "] token ", i,
             ": got an empty spelling, which a tokenizer.json vocab cannot hold");
    TP_CHECK(valid_utf8(tok), "[", kWhere, "] token ", i, ": got a spelling that is not UTF-8");
    const auto [at, fresh] = ids.emplace(tok, static_cast<int32_t>(i));
    TP_CHECK(fresh, "[", kWhere, "] token ", i, " '", tok, "': got the spelling of token ",
             at->second, " again, which a tokenizer.json vocab (a map) cannot hold");
  }
  return ids;
}

json vocab_object(const GgufVocab& v) {
  json vocab = json::object();
  for (size_t i = 0; i < v.tokens.size(); ++i) vocab[v.tokens[i]] = static_cast<int32_t>(i);
  return vocab;
}

// Control and unknown tokens are special (matched only when special tokens are allowed),
// user-defined ones are not (always matched); all on the raw text, as Tokenizer::from_gguf does.
json added_tokens(const GgufVocab& v) {
  json added = json::array();
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const int32_t type = token_type(v, i);
    const bool special =
        type == int32_t(GgufTokenType::kControl) || type == int32_t(GgufTokenType::kUnknown);
    if (!special && type != int32_t(GgufTokenType::kUserDefined)) continue;
    added.push_back({{"id", static_cast<int32_t>(i)},
                     {"content", v.tokens[i]},
                     {"single_word", false},
                     {"lstrip", false},
                     {"rstrip", false},
                     {"normalized", false},
                     {"special", special}});
  }
  return added;
}

// "bos $A" (and "bos $A bos $B" for pairs) when the vocabulary adds BOS; else null.
json bos_template(const GgufVocab& v) {
  if (!v.add_bos || v.bos_id < 0) return nullptr;
  const std::string& bos = v.tokens[static_cast<size_t>(v.bos_id)];
  auto special = [&](int type_id) {
    return json{{"SpecialToken", {{"id", bos}, {"type_id", type_id}}}};
  };
  auto seq = [](const char* id, int type_id) {
    return json{{"Sequence", {{"id", id}, {"type_id", type_id}}}};
  };
  return {{"type", "TemplateProcessing"},
          {"single", {special(0), seq("A", 0)}},
          {"pair", {special(0), seq("A", 0), special(1), seq("B", 1)}},
          {"special_tokens", {{bos, {{"id", bos}, {"ids", {v.bos_id}}, {"tokens", {bos}}}}}}};
}

json bpe_model(const GgufVocab& v, json merges, bool byte_fallback, bool ignore_merges) {
  const bool unk = byte_fallback && v.unk_id >= 0;  // byte-level BPE drops unknown bytes instead
  return {{"type", "BPE"},
          {"dropout", nullptr},
          {"unk_token", unk ? json(v.tokens[static_cast<size_t>(v.unk_id)]) : json(nullptr)},
          {"continuing_subword_prefix", nullptr},
          {"end_of_word_suffix", nullptr},
          {"fuse_unk", false},
          {"byte_fallback", byte_fallback},
          {"ignore_merges", ignore_merges},
          {"vocab", vocab_object(v)},
          {"merges", std::move(merges)}};
}

json split_step(std::string_view regex) {
  return {{"type", "Split"},
          {"pattern", {{"Regex", regex}}},
          {"behavior", "Isolated"},
          {"invert", false}};
}

// The pre-tokenizer that pre_tokenizer_from_gguf_name builds for each name, as HF spells it.
json gpt2_pre_tokenizer(std::string_view pre) {
  json steps = json::array();
  if (pre == "gpt2" || pre == "gpt-2" || pre == "default" || pre.empty()) {
    steps.push_back(split_step(kGpt2SplitPattern));
  } else if (pre == "llama3" || pre == "llama-bpe" || pre == "llama-3") {
    steps.push_back(split_step(kLlama3SplitPattern));
  } else if (pre == "qwen2" || pre == "qwen") {
    steps.push_back(split_step(kQwen2SplitPattern));
  } else if (pre == "smollm" || pre == "smollm2") {
    steps.push_back({{"type", "Digits"}, {"individual_digits", true}});
    steps.push_back(split_step(kGpt2SplitPattern));
  } else {
    TP_CHECK(false, "[", kWhere, "] tokenizer.ggml.pre: got '", pre,
             "', which the GGUF loader knows but no tokenizer.json layout is written for");
  }
  steps.push_back({{"type", "ByteLevel"},
                   {"add_prefix_space", false},
                   {"trim_offsets", true},
                   {"use_regex", false}});
  return {{"type", "Sequence"}, {"pretokenizers", std::move(steps)}};
}

json gpt2_tokenizer(const GgufVocab& v) {
  bool ignore_merges = false;
  (void)pre_tokenizer_from_gguf_name(v.pre, &ignore_merges);  // throws for an unknown name
  json merges = json::array();
  for (size_t r = 0; r < v.merges.size(); ++r) {
    const std::string& m = v.merges[r];
    const size_t sp = m.find(' ', 1);  // as from_gguf: a token may start with a space
    TP_CHECK(sp != std::string::npos && sp + 1 < m.size(), "[", kWhere, "] merge ", r, ": got '", m,
             "', expected two tokens separated by a space");
    merges.push_back({m.substr(0, sp), m.substr(sp + 1)});
  }
  json j;
  j["pre_tokenizer"] = gpt2_pre_tokenizer(v.pre);
  j["normalizer"] = nullptr;
  j["model"] = bpe_model(v, std::move(merges), /*byte_fallback=*/false, ignore_merges);
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  j["post_processor"] = bos_template(v);
  if (j["post_processor"].is_null())  // offsets only, as HF's GPT-2-style files have it
    j["post_processor"] = {{"type", "ByteLevel"},
                           {"add_prefix_space", true},
                           {"trim_offsets", false},
                           {"use_regex", true}};
  return j;
}

// SentencePiece BPE as rank-ordered merges. llama.cpp (and SentencePieceModel) repeatedly merges
// the adjacent pair whose concatenation is the token of highest score, leftmost on ties; HF's BPE
// merges the listed pair of lowest rank, leftmost on ties. Listing every split a + b of every
// token by the token's score gives the same merges unless two different pairs of equal score
// overlap (with a BPE-trained vocabulary's distinct scores: two splits of one token, x + y =
// y + z), where position and rank may choose differently; the tests found no such text. Byte
// tokens are never parts: HF's byte fallback makes them symbols that SentencePiece never merges.
json spm_merges(const GgufVocab& v, const std::unordered_map<std::string_view, int32_t>& ids) {
  struct Merge {
    float score;
    int32_t id, left, right;
  };
  std::vector<Merge> merges;
  auto part = [&](std::string_view s) {
    auto it = ids.find(s);
    return it == ids.end() || byte_token_value(s) >= 0 ? -1 : it->second;
  };
  merges.reserve(v.tokens.size() * 2);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string_view tok = v.tokens[i];
    for (size_t k = static_cast<size_t>(utf8_next(tok, 0).len); k < tok.size();
         k += static_cast<size_t>(utf8_next(tok, k).len)) {
      const int32_t a = part(tok.substr(0, k)), b = part(tok.substr(k));
      if (a >= 0 && b >= 0) merges.push_back({v.scores[i], static_cast<int32_t>(i), a, b});
    }
  }
  // Highest score first; then, as HF's SentencePiece converter orders them, by the ids.
  std::sort(merges.begin(), merges.end(), [](const Merge& x, const Merge& y) {
    return std::tie(y.score, x.id, x.left, x.right) < std::tie(x.score, y.id, y.left, y.right);
  });
  json out = json::array();
  auto& list = out.get_ref<json::array_t&>();
  list.reserve(merges.size());
  for (const Merge& m : merges)
    list.emplace_back(json::array_t{v.tokens[static_cast<size_t>(m.left)],
                                    v.tokens[static_cast<size_t>(m.right)]});
  return out;
}

json replace_step(std::string_view from, std::string_view to) {
  return {{"type", "Replace"}, {"pattern", {{"String", from}}}, {"content", to}};
}

json spm_tokenizer(const GgufVocab& v, const std::unordered_map<std::string_view, int32_t>& ids) {
  TP_CHECK(!v.scores.empty(), "[", kWhere,
           "] SentencePiece vocabulary without tokenizer.ggml.scores: its merges would have no "
           "order, so no tokenizer.json is written");
  for (size_t i = 0; i < v.scores.size(); ++i)
    TP_CHECK(std::isfinite(v.scores[i]), "[", kWhere, "] token ", i, " score: got ", v.scores[i],
             ", expected a finite number");
  json j;
  // As from_gguf: " " -> "▁" everywhere, then a "▁" before each stretch of text between added
  // tokens when add_space_prefix (the decoder's Strip takes the first one back off).
  if (v.add_space_prefix)
    j["normalizer"] = {
        {"type", "Sequence"},
        {"normalizers", {replace_step(" ", kSpace), {{"type", "Prepend"}, {"prepend", kSpace}}}}};
  else
    j["normalizer"] = replace_step(" ", kSpace);
  j["pre_tokenizer"] = nullptr;
  j["model"] = bpe_model(v, spm_merges(v, ids), /*byte_fallback=*/true, /*ignore_merges=*/false);
  json decoders = {replace_step(kSpace, " "), {{"type", "ByteFallback"}}, {{"type", "Fuse"}}};
  if (v.add_space_prefix)
    decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
  j["decoder"] = {{"type", "Sequence"}, {"decoders", std::move(decoders)}};
  j["post_processor"] = bos_template(v);
  return j;
}

void write_text(const std::filesystem::path& path, const json& j, int indent) {
  std::string text;
  try {
    text = j.dump(indent);
  } catch (const json::exception& e) {
    TP_CHECK(false, "[write_hf_tokenizer_files] ", path.string(), ": ", e.what());
  }
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TP_CHECK(f.good(), "[write_hf_tokenizer_files] cannot create '", path.string(), "'");
  f << text << '\n';
  f.close();
  TP_CHECK(f.good(), "[write_hf_tokenizer_files] cannot write '", path.string(), "'");
}

}  // namespace

json hf_tokenizer_json(const GgufVocab& vocab) {
  const auto ids = check_vocab(vocab);
  json j = vocab.model == "llama" ? spm_tokenizer(vocab, ids) : gpt2_tokenizer(vocab);
  j["version"] = "1.0";
  j["truncation"] = nullptr;
  j["padding"] = nullptr;
  j["added_tokens"] = added_tokens(vocab);
  return j;
}

json hf_tokenizer_config_json(const GgufVocab& vocab, std::string_view chat_template) {
  check_special_ids(vocab);
  json cfg = {{"tokenizer_class", "PreTrainedTokenizerFast"},
              {"add_bos_token", vocab.add_bos && vocab.bos_id >= 0},
              {"add_eos_token", false},
              {"clean_up_tokenization_spaces", false}};
  auto name = [&](int32_t id) { return vocab.tokens[static_cast<size_t>(id)]; };
  if (vocab.bos_id >= 0) cfg["bos_token"] = name(vocab.bos_id);
  if (vocab.eos_id >= 0) cfg["eos_token"] = name(vocab.eos_id);
  if (vocab.unk_id >= 0) cfg["unk_token"] = name(vocab.unk_id);
  if (!chat_template.empty()) cfg["chat_template"] = chat_template;
  return cfg;
}

void write_hf_tokenizer_files(const GgufVocab& vocab, const std::filesystem::path& dir,
                              std::string_view chat_template) {
  write_text(dir / "tokenizer.json", hf_tokenizer_json(vocab), -1);
  write_text(dir / "tokenizer_config.json", hf_tokenizer_config_json(vocab, chat_template), 2);
}

}  // namespace tensorpar

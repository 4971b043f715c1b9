// Loading an HF tokenizer.json (+ tokenizer_config.json): normalizer, pre-tokenizer, model (BPE
// with or without byte-level spelling and byte_fallback, Unigram), decoder, added tokens, and
// bos/eos/chat template. A component we do not implement is refused with a clear error rather
// than tokenized wrongly.
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "core/error.h"
#include "core/json_depth.h"
#include "tokenizer/bpe.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unigram.h"
#include "tokenizer/wordpiece.h"

namespace tensorpar {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "Tokenizer::from_json";
constexpr std::string_view kSpace = "\xE2\x96\x81";  // ▁, SentencePiece's space

std::string brief(const json& j) {
  std::string s = j.dump();
  return s.size() > 200 ? s.substr(0, 200) + "..." : s;
}

std::string type_of(const json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : "";
}

bool flag(const json& j, const char* key, bool dflt) {
  return j.contains(key) && j[key].is_boolean() ? j[key].get<bool>() : dflt;
}

std::string str(const json& j, const char* key, std::string dflt = "") {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::move(dflt);
}

// A number field as an int (absent or null: the fallback); Error naming it for another type or a
// value outside [lo, hi] (json's own get<int> would throw its type_error, or truncate).
int int_field(const json& j, const char* key, int dflt, int lo, int hi, const char* what) {
  if (!j.contains(key) || j[key].is_null()) return dflt;
  const json& v = j[key];
  TP_CHECK(v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(hi)) &&
               v.get<int64_t>() >= lo && v.get<int64_t>() <= hi,
           "[", kWhere, "] ", what, " ", key, ": got ", brief(v), ", expected an integer in [", lo, ", ",
           hi, "]");
  return static_cast<int>(v.get<int64_t>());
}

// Token ids index tables sized by the largest id, so they are checked against the file's size:
// ids below its number of tokens plus kSpareIds (room for unused ids, not for billions).
constexpr int64_t kSpareIds = 65536;

// limit_is: what the bound is, for the message.
int32_t token_id_value(const json& v, int64_t limit, const std::string& what,
                       const char* limit_is = "the file's token count + 65536") {
  TP_CHECK(v.is_number_integer() && !(v.is_number_unsigned() && v.get<uint64_t>() >= uint64_t(limit)) &&
               v.get<int64_t>() >= 0 && v.get<int64_t>() < limit,
           "[", kWhere, "] ", what, ": got id ", brief(v), ", expected an integer in [0, ", limit, ") (",
           limit_is, ")");
  return static_cast<int32_t>(v.get<int64_t>());
}

// A Split / Replace pattern: {"String": "..."} (literal) or {"Regex": "..."}.
std::string pattern_regex(const json& j, const char* what) {
  const json& p = j.contains("pattern") ? j["pattern"] : json();
  if (p.is_object() && p.contains("String") && p["String"].is_string())
    return regex_escape(p["String"].get<std::string>());
  TP_CHECK(p.is_object() && p.contains("Regex") && p["Regex"].is_string(), "[", kWhere, "] ", what,
           ": got ", brief(j), ", expected a pattern {\"String\": ...} or {\"Regex\": ...}");
  return p["Regex"].get<std::string>();
}

void parse_normalizer(const json& j, Normalizer& out) {
  if (j.is_null()) return;
  using K = NormalizerStep::Kind;
  const std::string type = type_of(j);
  if (type == "Sequence") {
    TP_CHECK(j.contains("normalizers") && j["normalizers"].is_array(), "[", kWhere,
             "] normalizer Sequence: got ", brief(j), ", expected a \"normalizers\" array");
    for (const json& e : j["normalizers"]) parse_normalizer(e, out);
  } else if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD" ||
             type == "Lowercase") {
    const K k = type == "NFC"    ? K::kNfc
                : type == "NFD"  ? K::kNfd
                : type == "NFKC" ? K::kNfkc
                : type == "NFKD" ? K::kNfkd
                                 : K::kLowercase;
    out.add({k, std::nullopt, "", false, false});
  } else if (type == "Replace") {
    out.add({K::kReplace, Regex(pattern_regex(j, "Replace normalizer")), str(j, "content"), false,
             false});
  } else if (type == "StripAccents") {  // removes every mark (HF's is_combining_mark)
    out.add({K::kReplace, Regex(R"(\p{M})"), "", false, false});
  } else if (type == "BertNormalizer") {
    if (flag(j, "clean_text", true)) {
      // Drop NUL, U+FFFD and control, format, private-use and surrogate characters but \t \n \r
      // (unassigned code points stay, as in HF); then whitespace -> " ".
      out.add({K::kReplace, Regex(R"((?![\t\n\r])[\x{0}\x{FFFD}\p{Cc}\p{Cf}\p{Co}\p{Cs}])"), "",
               false, false});
      out.add({K::kReplace, Regex(R"(\s)"), " ", false, false});
    }
    if (flag(j, "handle_chinese_chars", true))
      out.add(
          {K::kIsolate,
           Regex(R"([\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}\x{2A700}-\x{2B73F})"
                 R"(\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}\x{2F800}-\x{2FA1F}])"),
           "", false, false});
    const bool lowercase = flag(j, "lowercase", true);
    if (flag(j, "strip_accents", lowercase)) {
      out.add({K::kNfd, std::nullopt, "", false, false});
      out.add({K::kReplace, Regex(R"(\p{Mn})"), "", false, false});
    }
    if (lowercase) out.add({K::kLowercase, std::nullopt, "", false, false});
  } else if (type == "Prepend") {
    out.add({K::kPrepend, std::nullopt, str(j, "prepend"), false, false});
  } else if (type == "Strip") {
    out.add(
        {K::kStrip, std::nullopt, "", flag(j, "strip_left", true), flag(j, "strip_right", true)});
  } else {
    TP_CHECK(false, "[", kWhere, "] unsupported normalizer: got ", brief(j),
             ", expected NFC, NFD, NFKC, NFKD, Lowercase, Replace, Prepend, Strip, StripAccents, "
             "BertNormalizer or Sequence");
  }
}

SplitBehavior parse_behavior(const json& j) {
  const std::string b = str(j, "behavior", "Isolated");
  if (b == "Removed") return SplitBehavior::kRemoved;
  if (b == "Isolated") return SplitBehavior::kIsolated;
  if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (b == "Contiguous") return SplitBehavior::kContiguous;
  TP_CHECK(false, "[", kWhere, "] Split behavior: got '", b,
           "', expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous");
  return SplitBehavior::kIsolated;
}

PreTokenizerStep::Prepend parse_prepend_scheme(const json& j) {
  using P = PreTokenizerStep::Prepend;
  if (j.contains("prepend_scheme") && j["prepend_scheme"].is_string()) {
    const std::string s = j["prepend_scheme"].get<std::string>();
    if (s == "always") return P::kAlways;
    if (s == "first") return P::kFirst;
    if (s == "never") return P::kNever;
    TP_CHECK(false, "[", kWhere, "] Metaspace prepend_scheme: got '", s,
             "', expected always, first or never");
  }
  return flag(j, "add_prefix_space", true) ? P::kAlways : P::kNever;  // older files
}

// HF's Whitespace: \w+|[^\w\s]+ with Oniguruma's Unicode \w (letters, marks, decimal digits,
// connector punctuation), spelled out because PCRE2's \w differs.
constexpr std::string_view kWhitespacePattern =
    R"([\p{L}\p{M}\p{Nd}\p{Pc}]+|[^\p{L}\p{M}\p{Nd}\p{Pc}\s]+)";

// HF's Punctuation / BERT punctuation: ASCII punctuation or a Unicode P* character.
constexpr std::string_view kPunctuationPattern = R"([\p{P}!-/:-@\[-`{-~])";

void parse_pre_tokenizer(const json& j, PreTokenizer& out, bool* byte_level) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  if (type == "Sequence") {
    TP_CHECK(j.contains("pretokenizers") && j["pretokenizers"].is_array(), "[", kWhere,
             "] pre_tokenizer Sequence: got ", brief(j), ", expected a \"pretokenizers\" array");
    for (const json& e : j["pretokenizers"]) parse_pre_tokenizer(e, out, byte_level);
  } else if (type == "ByteLevel") {
    out.add(PreTokenizer::byte_level_step(flag(j, "add_prefix_space", false),
                                          flag(j, "use_regex", true)));
    *byte_level = true;
  } else if (type == "Split") {
    out.add(PreTokenizer::split_step(pattern_regex(j, "Split pre-tokenizer"), parse_behavior(j),
                                     flag(j, "invert", false)));
  } else if (type == "Metaspace") {
    PreTokenizerStep st;
    st.kind = PreTokenizerStep::Kind::kMetaspace;
    st.replacement = str(j, "replacement", std::string(kSpace));
    TP_CHECK(!st.replacement.empty(), "[", kWhere, "] Metaspace: got an empty replacement");
    st.prepend = parse_prepend_scheme(j);
    st.flag = flag(j, "split", true);
    out.add(std::move(st));
  } else if (type == "Digits") {
    out.add(PreTokenizer::split_step(flag(j, "individual_digits", false) ? R"(\p{N})" : R"(\p{N}+)",
                                     SplitBehavior::kIsolated));
  } else if (type == "Whitespace") {
    out.add(PreTokenizer::split_step(kWhitespacePattern, SplitBehavior::kRemoved, true));
  } else if (type == "WhitespaceSplit") {
    out.add(PreTokenizer::split_step(R"(\s+)", SplitBehavior::kRemoved));
  } else if (type == "Punctuation") {
    out.add(PreTokenizer::split_step(kPunctuationPattern, parse_behavior(j)));
  } else if (type == "BertPreTokenizer") {
    out.add(PreTokenizer::split_step(R"(\s+)", SplitBehavior::kRemoved));
    out.add(PreTokenizer::split_step(kPunctuationPattern, SplitBehavior::kIsolated));
  } else {
    TP_CHECK(false, "[", kWhere, "] unsupported pre_tokenizer: got ", brief(j),
             ", expected ByteLevel, Split, Metaspace, Digits, Whitespace, WhitespaceSplit, "
             "Punctuation, BertPreTokenizer or Sequence");
  }
}

// The decoder, reduced to what decode needs: per-token steps (applied to every vocab entry's
// spelling once, at load) and whether one leading space of the text is dropped.
struct DecoderPlan {
  struct Replace {
    std::optional<Regex> pattern;
    std::string content;
  };
  std::vector<Replace> replaces;  // Replace, and Metaspace's replacement -> " "
  bool byte_level = false;        // ByteLevel: undo the byte-level map
  bool byte_fallback = false;     // ByteFallback: <0xNN> -> the byte
  bool strip_leading_space = false;
  // WordPiece: tokens joined by spaces except those with this prefix (then removed); cleanup
  // glues punctuation and contractions back (" ." -> ".", " n't" -> "n't", ...).
  std::optional<std::string> wordpiece_prefix;
  bool wordpiece_cleanup = false;
};

std::string wordpiece_cleanup(std::string s) {
  static constexpr std::pair<std::string_view, std::string_view> kRules[] = {
      {" .", "."},   {" ?", "?"},     {" !", "!"},    {" ,", ","},
      {" ' ", "'"},  {" n't", "n't"}, {" 'm", "'m"},  {" do not", " don't"},
      {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    std::string out;
    size_t done = 0;
    for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, done)) {
      out.append(s, done, at - done);
      out += to;
      done = at + from.size();
    }
    out.append(s, done, std::string::npos);
    s = std::move(out);
  }
  return s;
}

// What one token decodes to, between others, under a WordPiece decoder.
std::string wordpiece_piece(const DecoderPlan& d, const std::string& spelled) {
  std::string s = spelled.compare(0, d.wordpiece_prefix->size(), *d.wordpiece_prefix) == 0
                      ? spelled.substr(d.wordpiece_prefix->size())
                      : " " + spelled;
  return d.wordpiece_cleanup ? wordpiece_cleanup(std::move(s)) : s;
}

void parse_decoder(const json& j, DecoderPlan& out) {
  if (j.is_null()) return;
  const std::string type = type_of(j);
  if (type == "Sequence") {
    TP_CHECK(j.contains("decoders") && j["decoders"].is_array(), "[", kWhere,
             "] decoder Sequence: got ", brief(j), ", expected a \"decoders\" array");
    for (const json& e : j["decoders"]) parse_decoder(e, out);
  } else if (type == "ByteLevel") {
    out.byte_level = true;
  } else if (type == "ByteFallback") {
    out.byte_fallback = true;
  } else if (type == "Fuse") {
    // decode concatenates anyway
  } else if (type == "Replace") {
    out.replaces.push_back({Regex(pattern_regex(j, "Replace decoder")), str(j, "content")});
  } else if (type == "Metaspace") {
    out.replaces.push_back({Regex(regex_escape(str(j, "replacement", std::string(kSpace)))), " "});
    if (parse_prepend_scheme(j) != PreTokenizerStep::Prepend::kNever)
      out.strip_leading_space = true;
  } else if (type == "WordPiece") {
    out.wordpiece_prefix = str(j, "prefix", "##");
    out.wordpiece_cleanup = flag(j, "cleanup", true);
    out.strip_leading_space = true;
  } else if (type == "Strip") {
    const int start = int_field(j, "start", 0, 0, 1 << 20, "Strip decoder");
    const int stop = int_field(j, "stop", 0, 0, 1 << 20, "Strip decoder");
    TP_CHECK(str(j, "content") == " " && start <= 1 && stop == 0, "[", kWhere,
             "] Strip decoder: got ", brief(j), ", expected content \" \", start 0 or 1, stop 0");
    if (start == 1) out.strip_leading_space = true;
  } else {
    TP_CHECK(false, "[", kWhere, "] unsupported decoder: got ", brief(j),
             ", expected ByteLevel, ByteFallback, Fuse, Replace, Metaspace, Strip, WordPiece or "
             "Sequence");
  }
}

std::string apply_replaces(const DecoderPlan& d, std::string s) {
  for (const DecoderPlan::Replace& r : d.replaces) {
    std::string out;
    size_t done = 0;
    for (const auto& [b, e] : r.pattern->find_all(s)) {
      out.append(s, done, b - done);
      out += r.content;
      done = e;
    }
    out.append(s, done, std::string::npos);
    s = std::move(out);
  }
  return s;
}

// "bos_token": "<s>" or {"content": "<s>", ...} in tokenizer_config.json.
std::string token_content(const json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string())
    return j["content"].get<std::string>();
  return "";
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TP_CHECK(f.good(), "[Tokenizer::from_json_file] cannot open '", path, "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

Tokenizer Tokenizer::from_json_file(const std::string& path) {
  const std::string text = read_file(path);
  const auto config = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::string config_text;
  if (std::filesystem::exists(config)) config_text = read_file(config.string());
  try {
    return from_json_string(text, config_text);
  } catch (const Error& e) {
    throw Error(std::string(e.what()) + " (file '" + path + "')");
  }
}

Tokenizer Tokenizer::from_json_string(std::string_view tokenizer_json,
                                      std::string_view config_json) {
  json j, cfg;
  try {
    j = json::parse(tokenizer_json, json_depth_limit(std::string("[") + kWhere + "] tokenizer.json"));
    if (!config_json.empty())
      cfg = json::parse(config_json, json_depth_limit(std::string("[") + kWhere + "] tokenizer_config.json"));
  } catch (const json::exception& e) {
    TP_CHECK(false, "[", kWhere, "] malformed JSON: ", e.what());
  }
  TP_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), "[", kWhere,
           "] got no \"model\" object, expected an HF tokenizer.json");
  const json& model = j["model"];
  const std::string mtype =
      type_of(model).empty() && model.contains("merges") ? "BPE" : type_of(model);
  TP_CHECK(mtype == "BPE" || mtype == "Unigram" || mtype == "WordPiece", "[", kWhere,
           "] model type: got '", mtype,
           "', expected 'BPE', 'Unigram' or 'WordPiece' (WordLevel is not supported)");

  // The bound on ids: the entries of the vocab and added_tokens, plus spare room.
  int64_t id_limit = kSpareIds;
  if (model.contains("vocab") && (model["vocab"].is_object() || model["vocab"].is_array()))
    id_limit += int64_t(model["vocab"].size());
  if (j.contains("added_tokens") && j["added_tokens"].is_array())
    id_limit += int64_t(j["added_tokens"].size());

  Tokenizer t;
  parse_normalizer(j.contains("normalizer") ? j["normalizer"] : json(), t.normalizer_);
  bool byte_level = false;
  parse_pre_tokenizer(j.contains("pre_tokenizer") ? j["pre_tokenizer"] : json(), t.pre_tokenizer_,
                      &byte_level);
  DecoderPlan dec;
  parse_decoder(j.contains("decoder") ? j["decoder"] : json(), dec);
  // The vocabulary is byte-level spelled when the pre-tokenizer or the decoder says so.
  byte_level = byte_level || dec.byte_level;
  t.byte_level_ = byte_level;
  t.strip_leading_space_ = dec.strip_leading_space;
  t.byte_fallback_decode_ = dec.byte_fallback;
  if (dec.wordpiece_prefix) t.wordpiece_prefix_ = *dec.wordpiece_prefix;
  // The bytes a vocab entry decodes to.
  auto decoded = [&](const std::string& spelled, std::string* key) {
    std::string raw;
    if (byte_level && byte_level_decode(spelled, &raw)) {
      *key = raw;
      return raw;
    }
    *key = spelled;
    if (dec.wordpiece_prefix) return wordpiece_piece(dec, spelled);
    const int b = dec.byte_fallback ? byte_token_value(spelled) : -1;
    if (b >= 0) return std::string(1, static_cast<char>(b));
    return apply_replaces(dec, spelled);
  };

  if (mtype == "WordPiece") {
    TP_CHECK(model.contains("vocab") && model["vocab"].is_object(), "[", kWhere,
             "] WordPiece model: got no vocab object");
    const std::string unk = str(model, "unk_token", "[UNK]");
    const int32_t unk_id = model["vocab"].contains(unk)
                               ? token_id_value(model["vocab"][unk], id_limit, "WordPiece unk_token '" + unk + "'")
                               : -1;
    auto wp = std::make_shared<WordPieceModel>(
        unk_id, str(model, "continuing_subword_prefix", "##"),
        size_t(int_field(model, "max_input_chars_per_word", 100, 0, std::numeric_limits<int>::max(), "WordPiece")));
    for (const auto& [spelled, idj] : model["vocab"].items()) {
      const int32_t id = token_id_value(idj, id_limit, "vocab entry '" + spelled + "'");
      std::string key;
      std::string bytes = decoded(spelled, &key);
      wp->add_token(key, id);
      t.set_token(id, spelled, std::move(bytes), Kind::kNormal);
    }
    t.model_ = wp;
  } else if (mtype == "Unigram") {
    TP_CHECK(model.contains("vocab") && model["vocab"].is_array(), "[", kWhere,
             "] Unigram model: got no vocab array, expected [[piece, score], ...]");
    // unk_id indexes the vocab list (absent or null: none).
    const json& unk_j = model.contains("unk_id") ? model["unk_id"] : json();
    const int32_t unk = unk_j.is_null() ? -1
                                        : token_id_value(unk_j, int64_t(model["vocab"].size()), "Unigram unk_id",
                                                         "an index into the vocab");
    auto uni = std::make_shared<UnigramModel>(unk, flag(model, "byte_fallback", false));
    int32_t id = 0;
    for (const json& e : model["vocab"]) {
      TP_CHECK(e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_number(), "[", kWhere,
               "] Unigram vocab entry ", id, ": got ", brief(e), ", expected [piece, score]");
      const std::string spelled = e[0].get<std::string>();
      std::string key;
      std::string bytes = decoded(spelled, &key);
      uni->add_token(key, id, e[1].get<double>());
      t.set_token(id, spelled, std::move(bytes), Kind::kNormal);
      ++id;
    }
    t.model_ = uni;
  } else {
    for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
      TP_CHECK(!model.contains(key) || model[key].is_null() || model[key] == "", "[", kWhere,
               "] BPE ", key, ": got ", brief(model[key]), ", expected none (not supported)");
    TP_CHECK(model.contains("vocab") && model["vocab"].is_object() && model.contains("merges") &&
                 model["merges"].is_array(),
             "[", kWhere, "] BPE model: got no vocab object or merges array, expected both");
    BpeOptions o;
    o.byte_level = byte_level;
    o.byte_fallback = flag(model, "byte_fallback", false);
    o.ignore_merges = flag(model, "ignore_merges", false);
    o.fuse_unk = flag(model, "fuse_unk", false);
    const std::string unk = str(model, "unk_token");
    if (!unk.empty() && model["vocab"].contains(unk))
      o.unk_id = token_id_value(model["vocab"][unk], id_limit, "BPE unk_token '" + unk + "'");
    auto bpe = std::make_shared<BpeModel>(o);
    for (const auto& [spelled, idj] : model["vocab"].items()) {
      const int32_t id = token_id_value(idj, id_limit, "vocab entry '" + spelled + "'");
      std::string key;
      std::string bytes = decoded(spelled, &key);
      bpe->add_token(key, id);
      t.set_token(id, spelled, std::move(bytes), Kind::kNormal);
    }
    int32_t rank = 0;
    for (const json& m : model["merges"]) {
      std::string sa, sb;
      if (m.is_string()) {
        const std::string s = m.get<std::string>();
        const size_t sp = s.find(' ', 1);
        TP_CHECK(sp != std::string::npos, "[", kWhere, "] merge ", rank, ": got '", s,
                 "', expected two tokens separated by a space");
        sa = s.substr(0, sp);
        sb = s.substr(sp + 1);
      } else {
        TP_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), "[", kWhere,
                 "] merge ", rank, ": got ", brief(m), ", expected \"a b\" or [\"a\", \"b\"]");
        sa = m[0].get<std::string>();
        sb = m[1].get<std::string>();
      }
      std::string a = sa, b = sb;
      if (byte_level)
        TP_CHECK(byte_level_decode(sa, &a) && byte_level_decode(sb, &b), "[", kWhere, "] merge ",
                 rank, ": got '", sa, " ", sb, "', expected byte-level spelled tokens");
      bpe->add_merge(a, b, rank++);
    }
    t.model_ = bpe;
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      TP_CHECK(a.is_object() && a.contains("id") && a.contains("content") && a["content"].is_string(),
               "[", kWhere, "] added token: got ", brief(a), ", expected {id, content, ...}");
      const int32_t id = token_id_value(a["id"], id_limit, "added token " + brief(a["content"]));
      t.add_added({a["content"].get<std::string>(), id, flag(a, "special", false), flag(a, "lstrip", false),
                   flag(a, "rstrip", false)});
    }
  }
  if (dec.wordpiece_prefix)  // added tokens are joined with spaces too
    for (const Added& a : t.added_)
      t.bytes_[static_cast<size_t>(a.id)] = wordpiece_piece(dec, a.content);
  // bos: the special token a TemplateProcessing post-processor puts first (Llama 3 style).
  const json& post = j.contains("post_processor") ? j["post_processor"] : json();
  if (type_of(post) == "TemplateProcessing" && post.contains("single") &&
      post["single"].is_array() && !post["single"].empty() &&
      post["single"][0].contains("SpecialToken")) {
    const json& special = post["single"][0]["SpecialToken"];
    TP_CHECK(special.is_object() && special.contains("id") && special["id"].is_string(), "[", kWhere,
             "] TemplateProcessing single[0].SpecialToken: got ", brief(special),
             ", expected {\"id\": the token's text, ...}");
    t.bos_id_ = t.token_id(special["id"].get<std::string>());
    t.add_bos_ = t.bos_id_ >= 0;
  }
  if (cfg.is_object()) {
    if (cfg.contains("bos_token")) t.bos_id_ = t.token_id(token_content(cfg["bos_token"]));
    if (cfg.contains("eos_token")) t.eos_id_ = t.token_id(token_content(cfg["eos_token"]));
    t.add_bos_ = flag(cfg, "add_bos_token", t.add_bos_) && t.bos_id_ >= 0;
    if (cfg.contains("chat_template")) {
      const json& ct = cfg["chat_template"];
      if (ct.is_string()) {
        t.chat_template_ = ct.get<std::string>();
      } else if (ct.is_array()) {  // [{name, template}, ...]: the default one, else the first
        for (const json& e : ct)
          TP_CHECK(e.is_object() && (!e.contains("name") || e["name"].is_string()) &&
                       (!e.contains("template") || e["template"].is_string()),
                   "[", kWhere, "] tokenizer_config.json chat_template entry: got ", brief(e),
                   ", expected {\"name\": string, \"template\": string}");
        for (const json& e : ct)
          if (str(e, "name") == "default") t.chat_template_ = str(e, "template");
        if (t.chat_template_.empty() && !ct.empty()) t.chat_template_ = str(ct[0], "template");
      }
    }
  }
  if (t.eos_id_ < 0) {  // no config: the usual end-of-text token
    for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>"})
      if (t.eos_id_ < 0) t.eos_id_ = t.token_id(name);
  }
  t.finish(kWhere);
  return t;
}

}  // namespace tensorpar

// Loading an HF tokenizer.json (+ tokenizer_config.json): the BPE model, the pre-tokenizer
// (recognised among the supported patterns), added tokens, and bos/eos/chat template. Anything
// that is not byte-level BPE is refused with a clear error rather than tokenized wrongly.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar {
namespace {

using nlohmann::json;

constexpr const char* kWhere = "Tokenizer::from_json";
constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

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

void check_byte_level(const json& j, bool want_regex) {
  TP_CHECK(type_of(j) == "ByteLevel", "[", kWhere, "] pre_tokenizer: got ", brief(j),
           ", expected a ByteLevel step");
  TP_CHECK(!flag(j, "add_prefix_space", false), "[", kWhere,
           "] ByteLevel add_prefix_space=true: got it, expected false (not supported)");
  TP_CHECK(flag(j, "use_regex", true) == want_regex, "[", kWhere, "] ByteLevel use_regex: got ",
           !want_regex, ", expected ", want_regex, " in this pre-tokenizer sequence");
}

PreTokenizer parse_pre_tokenizer(const json& j) {
  const std::string type = type_of(j);
  if (type == "ByteLevel") {
    check_byte_level(j, true);
    return PreTokenizer::kGpt2;
  }
  TP_CHECK(type == "Sequence" && j.contains("pretokenizers") && j["pretokenizers"].is_array() &&
               j["pretokenizers"].size() == 2,
           "[", kWhere, "] unsupported pre_tokenizer: got ", brief(j),
           ", expected ByteLevel, Digits+ByteLevel or Split(regex)+ByteLevel");
  const json& first = j["pretokenizers"][0];
  const json& second = j["pretokenizers"][1];
  if (type_of(first) == "Digits") {
    TP_CHECK(flag(first, "individual_digits", false), "[", kWhere,
             "] Digits pre-tokenizer: got individual_digits=false, expected true");
    check_byte_level(second, true);
    return PreTokenizer::kSmolLM;
  }
  TP_CHECK(type_of(first) == "Split" && first.contains("pattern") && first["pattern"].is_object() &&
               first["pattern"].contains("Regex"),
           "[", kWhere, "] unsupported pre_tokenizer: got ", brief(first),
           ", expected Split with a Regex");
  TP_CHECK(first.value("behavior", "") == "Isolated" && !flag(first, "invert", false), "[", kWhere,
           "] Split: got ", brief(first), ", expected behavior Isolated, invert false");
  check_byte_level(second, false);
  const std::string pattern = first["pattern"]["Regex"].get<std::string>();
  if (pattern == kLlama3Pattern) return PreTokenizer::kLlama3;
  if (pattern == kQwen2Pattern) return PreTokenizer::kQwen2;
  if (pattern == kGpt2Pattern) return PreTokenizer::kGpt2;
  TP_CHECK(false, "[", kWhere, "] unsupported Split regex: got '", pattern,
           "', expected the GPT-2, Llama 3 or Qwen2 pattern");
  return PreTokenizer::kGpt2;
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
    j = json::parse(tokenizer_json);
    if (!config_json.empty()) cfg = json::parse(config_json);
  } catch (const json::exception& e) {
    TP_CHECK(false, "[", kWhere, "] malformed JSON: ", e.what());
  }
  TP_CHECK(j.is_object() && j.contains("model") && j["model"].is_object(), "[", kWhere,
           "] got no \"model\" object, expected an HF tokenizer.json");
  const json& model = j["model"];
  const std::string mtype =
      type_of(model).empty() && model.contains("merges") ? "BPE" : type_of(model);
  TP_CHECK(mtype == "BPE", "[", kWhere, "] model type: got '", mtype,
           "', expected 'BPE' (only byte-level BPE supported)");
  TP_CHECK(!flag(model, "byte_fallback", false), "[", kWhere,
           "] BPE byte_fallback=true (SentencePiece-style): got it, expected byte-level BPE (only "
           "byte-level BPE supported)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    TP_CHECK(!model.contains(key) || model[key].is_null() || model[key] == "", "[", kWhere,
             "] BPE ", key, ": got ", brief(model[key]),
             ", expected none (only byte-level BPE supported)");
  TP_CHECK(model.contains("vocab") && model["vocab"].is_object() && model.contains("merges") &&
               model["merges"].is_array(),
           "[", kWhere, "] BPE model: got no vocab object or merges array, expected both");
  const json& norm = j.contains("normalizer") ? j["normalizer"] : json();
  TP_CHECK(norm.is_null() || type_of(norm) == "NFC", "[", kWhere, "] unsupported normalizer: got ",
           brief(norm), ", expected none or NFC");
  TP_CHECK(j.contains("pre_tokenizer") && !j["pre_tokenizer"].is_null(), "[", kWhere,
           "] got no pre_tokenizer, expected a byte-level one");

  Tokenizer t;
  t.pre_ = parse_pre_tokenizer(j["pre_tokenizer"]);
  t.ignore_merges_ = flag(model, "ignore_merges", false);
  t.nfc_ = type_of(norm) == "NFC";
  for (const auto& [spelled, idj] : model["vocab"].items()) {
    TP_CHECK(idj.is_number_integer(), "[", kWhere, "] vocab entry '", spelled, "': got ",
             brief(idj), ", expected an integer id");
    const int32_t id = idj.get<int32_t>();
    std::string raw;
    if (byte_level_decode(spelled, &raw)) {
      t.bpe_.add_token(raw, id);
    } else {
      raw = spelled;  // not byte-level spelled (e.g. a special token): kept verbatim
    }
    t.set_token(id, std::move(raw), Kind::kNormal);
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
    std::string a, b;
    TP_CHECK(byte_level_decode(sa, &a) && byte_level_decode(sb, &b), "[", kWhere, "] merge ", rank,
             ": got '", sa, " ", sb, "', expected byte-level spelled tokens");
    t.bpe_.add_merge(a, b, rank++);
  }
  if (j.contains("added_tokens") && j["added_tokens"].is_array()) {
    for (const json& a : j["added_tokens"]) {
      TP_CHECK(a.is_object() && a.contains("id") && a["id"].is_number_integer() &&
                   a.contains("content") && a["content"].is_string(),
               "[", kWhere, "] added token: got ", brief(a), ", expected {id, content, ...}");
      t.add_added({a["content"].get<std::string>(), a["id"].get<int32_t>(),
                   flag(a, "special", false), flag(a, "lstrip", false), flag(a, "rstrip", false)});
    }
  }
  // bos: the special token a TemplateProcessing post-processor puts first (Llama 3 style).
  const json& post = j.contains("post_processor") ? j["post_processor"] : json();
  if (type_of(post) == "TemplateProcessing" && post.contains("single") &&
      post["single"].is_array() && !post["single"].empty() &&
      post["single"][0].contains("SpecialToken")) {
    t.bos_id_ = t.token_id(post["single"][0]["SpecialToken"].value("id", ""));
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
          if (e.is_object() && e.value("name", "") == "default")
            t.chat_template_ = e.value("template", "");
        if (t.chat_template_.empty() && !ct.empty() && ct[0].is_object())
          t.chat_template_ = ct[0].value("template", "");
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

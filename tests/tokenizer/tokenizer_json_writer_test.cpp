// A GGUF vocabulary written as tokenizer.json (tokenizer_json_writer.h) and read back through
// Tokenizer::from_json_* tokenizes as Tokenizer::from_gguf does: the same ids with and without
// special tokens and the same decoded text, on the texts of every *.cases.json fixture and on
// random id sequences. Vocabularies: SmolLM2's (the trimmed fixture under each pre-tokenizer name,
// and the real GGUF), a SentencePiece one built from spm_bpe.tokenizer.json, and Gemma 3's GGUF.
// With TP_TOKENIZER_JSON_DUMP=DIR each test also writes DIR/<name>/{tokenizer.json,
// tokenizer_config.json, expected.json} for tests/tokenizer/check_written_tokenizer_json.py,
// which checks the same files in HF `tokenizers`.
#include "tokenizer/tokenizer_json_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "core/error.h"
#include "fixtures_dir.h"
#include "io/gguf.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/unicode.h"
#include "tokenizer_fixture.h"

namespace tensorpar {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::load_tokenizer_fixture;

const std::string kGemmaModel = test::fixtures_dir() + "/../../models/gemma-3-270m-q4_k_m.gguf";
const std::string kSmolModel = test::fixtures_dir() + "/../../models/SmolLM2-135M-Instruct.Q4_1.gguf";

// SmolLM2's GGUF vocabulary from the trimmed fixture (as testing::load_smollm2_gguf_fixture, but
// the GgufVocab itself): unused placeholders fill the gaps so ids stay those of the real model.
GgufVocab smollm2_fixture_vocab() {
  const json j = load_tokenizer_fixture("smollm2_gguf_vocab.json");
  const int n = j["vocab_size"].get<int>();
  GgufVocab v;
  v.tokens.resize(static_cast<size_t>(n));
  v.token_types.assign(static_cast<size_t>(n), int32_t(GgufTokenType::kUnused));
  for (int i = 0; i < n; ++i)
    v.tokens[static_cast<size_t>(i)] = "<unused_" + std::to_string(i) + ">";
  for (const auto& [id, tok] : j["tokens"].items())
    v.tokens[std::stoul(id)] = tok.get<std::string>();
  for (const auto& [id, ty] : j["token_types"].items())
    v.token_types[std::stoul(id)] = ty.get<int32_t>();
  v.merges = j["merges"].get<std::vector<std::string>>();
  v.bos_id = j["bos_id"].get<int32_t>();
  v.eos_id = j["eos_id"].get<int32_t>();
  v.pre = j["pre"].get<std::string>();
  return v;
}

// The tokenizer.ggml.* metadata of a GGUF file with llama.cpp's defaults (as load_tokenizer).
GgufVocab gguf_file_vocab(const std::string& path) {
  auto file = GgufFile::open(path);
  const GgufMetadata& md = file->metadata();
  GgufVocab v;
  v.model = md.get_string_or("tokenizer.ggml.model", "gpt2");
  v.pre = md.get_string_or("tokenizer.ggml.pre", "default");
  v.tokens = md.get_string_array("tokenizer.ggml.tokens");
  if (md.has("tokenizer.ggml.merges")) v.merges = md.get_string_array("tokenizer.ggml.merges");
  if (md.has("tokenizer.ggml.scores")) v.scores = md.get_f32_array("tokenizer.ggml.scores");
  if (md.has("tokenizer.ggml.token_type"))
    v.token_types = md.get_i32_array("tokenizer.ggml.token_type");
  auto id_or = [&](const char* key) { return md.has(key) ? int32_t(md.get_u32(key)) : -1; };
  v.bos_id = id_or("tokenizer.ggml.bos_token_id");
  v.eos_id = id_or("tokenizer.ggml.eos_token_id");
  v.unk_id = id_or("tokenizer.ggml.unknown_token_id");
  const bool spm = v.model == "llama";
  v.add_bos = md.get_bool_or("tokenizer.ggml.add_bos_token", spm);
  v.add_space_prefix = md.get_bool_or("tokenizer.ggml.add_space_prefix", spm);
  return v;
}

// A SentencePiece ("llama") vocabulary made from the spm_bpe fixture's BPE: each merged token
// scores minus its merge rank (SentencePiece scores pieces by creation order), <0xNN> tokens are
// byte tokens, <unk>/<s>/</s> unknown and control; two user-defined tokens and a control one are
// appended. Its small alphabet sends most non-Latin text through byte fallback.
GgufVocab spm_fixture_vocab(bool add_space_prefix) {
  const json j = load_tokenizer_fixture("spm_bpe.tokenizer.json");
  const json& model = j["model"];
  GgufVocab v;
  v.model = "llama";
  v.tokens.resize(model["vocab"].size());
  for (const auto& [tok, id] : model["vocab"].items()) v.tokens[id.get<size_t>()] = tok;
  const size_t n = v.tokens.size();
  v.scores.assign(n, -1e6f);
  v.token_types.assign(n, int32_t(GgufTokenType::kNormal));
  int32_t rank = 0;
  for (const json& m : model["merges"]) {
    const std::string s = m.get<std::string>();
    const std::string merged = s.substr(0, s.find(' ', 1)) + s.substr(s.find(' ', 1) + 1);
    const int32_t id = model["vocab"][merged].get<int32_t>();
    if (v.scores[static_cast<size_t>(id)] == -1e6f)
      v.scores[static_cast<size_t>(id)] = -float(rank);
    ++rank;
  }
  for (size_t i = 0; i < n; ++i)
    if (byte_token_value(v.tokens[i]) >= 0) {
      v.token_types[i] = int32_t(GgufTokenType::kByte);
      v.scores[i] = 0;
    }
  v.token_types[0] = int32_t(GgufTokenType::kUnknown);
  v.token_types[1] = v.token_types[2] = int32_t(GgufTokenType::kControl);
  for (const auto& [tok, type] : {std::pair{"<start_of_turn>", GgufTokenType::kControl},
                                  {"<table>", GgufTokenType::kUserDefined},
                                  {"  ", GgufTokenType::kUserDefined}}) {
    v.tokens.push_back(tok);
    v.token_types.push_back(int32_t(type));
    v.scores.push_back(-1000);
  }
  v.unk_id = 0;
  v.bos_id = 1;
  v.eos_id = 2;
  v.add_bos = true;
  v.add_space_prefix = add_space_prefix;
  return v;
}

// The inputs of every tokenizer fixture (*.cases.json: "text", or "bytes" where not UTF-8), and a
// few more: runs of spaces, tabs and newlines around special-token text, digits, "▁" itself.
const std::vector<std::string>& corpus() {
  static const std::vector<std::string> texts = [] {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(test::fixtures_dir() + "/tokenizer"))
      if (e.path().filename().string().ends_with(".cases.json")) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    std::vector<std::string> out;
    for (const fs::path& f : files) {
      const json j = load_tokenizer_fixture(f.filename().string());
      for (const json& c : j.contains("encode") ? j["encode"] : j["cases"]) {
        if (c.contains("text")) {
          out.push_back(c["text"].get<std::string>());
        } else {
          std::string s;
          for (int b : c["bytes"].get<std::vector<int>>()) s += static_cast<char>(b);
          out.push_back(std::move(s));
        }
      }
    }
    for (const char* s : {"", " ", "  ", "   x", "x   ", "\t\t\ta\n\n\nb\r\n", " <s> </s><s>x",
                          "<start_of_turn>user\n", "<|im_start|>  <|im_end|>\n",
                          "12345678901234567890 3.14159 ١٢٣ ½", "▁▁a ▁", "a  b   c"})
      out.push_back(s);
    return out;
  }();
  return texts;
}

bool valid_utf8(std::string_view s) {
  return utf8_lossy(s) == s;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) s += std::to_string(id) + " ";
  return s;
}

bool is_byte_token(const Tokenizer& tok, int32_t id) {
  return !tok.is_special(id) && byte_token_value(tok.token_text(id)) >= 0;
}

// Whether every run of consecutive <0xNN> tokens in ids is valid UTF-8. Only then do the decoders
// agree: HF's ByteFallback turns an invalid run into one U+FFFD per byte, while the GGUF tokenizer
// joins the raw bytes, as llama.cpp does, and repairs the whole text once.
bool byte_runs_valid(const Tokenizer& tok, const std::vector<int32_t>& ids) {
  std::string run;
  for (int32_t id : ids) {
    if (is_byte_token(tok, id)) {
      run += tok.token_bytes(id);
      continue;
    }
    if (!valid_utf8(run)) return false;
    run.clear();
  }
  return valid_utf8(run);
}

// What a tokenizer gives for the corpus, kept for the Python check.
struct Expected {
  json encode = json::array(), decode = json::array();
};

// got (from the written tokenizer.json) tokenizes as want (from the GGUF vocabulary). Invalid
// UTF-8 text is compared for SentencePiece vocabularies only by the decoding of want's ids (see
// below), and decoding only where byte_runs_valid; the counts left out are test properties.
void expect_same_tokenizer(const Tokenizer& want, const Tokenizer& got, const std::string& name,
                           bool spm, Expected* out) {
  ASSERT_EQ(got.vocab_size(), want.vocab_size());
  EXPECT_EQ(got.bos_id(), want.bos_id());
  EXPECT_EQ(got.eos_id(), want.eos_id());
  EXPECT_EQ(got.add_bos(), want.add_bos());
  for (int32_t id = 0; id < want.vocab_size(); ++id) {
    ASSERT_EQ(got.token_bytes(id), want.token_bytes(id)) << "id " << id;
    ASSERT_EQ(got.is_special(id), want.is_special(id)) << "id " << id;
    ASSERT_EQ(got.is_eos(id), want.is_eos(id)) << "id " << id;
  }
  int n_compared = 0, n_invalid = 0, n_invalid_same = 0;
  for (const std::string& text : corpus()) {
    const auto ids = want.encode(text), plain = want.encode(text, /*allow_special=*/false);
    const bool valid = valid_utf8(text);
    // A tokenizer.json model splits invalid UTF-8 as HF does (maximal subparts), llama.cpp's
    // SentencePiece by the length its lead byte announces: those texts may split differently.
    if (spm && !valid) {
      ++n_invalid;
      n_invalid_same += got.encode(text) == ids;
      if (byte_runs_valid(want, ids)) {
        EXPECT_EQ(got.decode(ids), want.decode(ids)) << "text: '" << text << "'";
      }
      continue;
    }
    EXPECT_EQ(got.encode(text), ids) << "text: '" << text << "'\nwant: " << show(ids);
    EXPECT_EQ(got.encode(text, /*allow_special=*/false), plain) << "text: '" << text << "'";
    EXPECT_EQ(got.decode(ids), want.decode(ids)) << "text: '" << text << "'";
    ++n_compared;
    if (out != nullptr && valid)
      out->encode.push_back(
          {{"text", text}, {"ids", ids}, {"ids_no_special", plain}, {"decoded", want.decode(ids)}});
  }
  EXPECT_GT(n_compared, 2000);
  ::testing::Test::RecordProperty(name + "_texts_compared", n_compared);
  if (spm) {
    ::testing::Test::RecordProperty(name + "_invalid_utf8_texts", n_invalid);
    ::testing::Test::RecordProperty(name + "_invalid_utf8_texts_same_ids", n_invalid_same);
  }
  // Random id sequences over the whole vocabulary; in a third of the places, the byte tokens of a
  // random character (when the vocabulary has byte tokens).
  TP_SEED_TRACE();
  testing::Rng rng(7);
  std::array<int32_t, 256> byte_id{};
  byte_id.fill(-1);
  for (int32_t id = 0; id < want.vocab_size(); ++id)
    if (is_byte_token(want, id))
      byte_id[static_cast<size_t>(byte_token_value(want.token_text(id)))] = id;
  const bool has_bytes = std::find(byte_id.begin(), byte_id.end(), -1) == byte_id.end();
  int n_decode_skipped = 0;
  for (int k = 0; k < 600; ++k) {
    std::vector<int32_t> ids;
    for (int64_t n = rng.integer(1, 12); n > 0; --n) {
      if (!has_bytes || rng.integer(0, 3) != 0) {
        int32_t id;
        do {  // byte tokens only as whole characters, below
          id = static_cast<int32_t>(rng.integer(0, want.vocab_size()));
        } while (has_bytes && is_byte_token(want, id));
        ids.push_back(id);
        continue;
      }
      std::string ch;
      const int64_t cp = rng.integer(0x80, 0x110000 - 0x800);  // no surrogates
      utf8_append(ch, static_cast<uint32_t>(cp < 0xD800 ? cp : cp + 0x800));
      for (char b : ch) ids.push_back(byte_id[static_cast<uint8_t>(b)]);
    }
    if (!byte_runs_valid(want, ids)) {
      ++n_decode_skipped;
      continue;
    }
    EXPECT_EQ(got.decode(ids), want.decode(ids)) << "ids: " << show(ids);
    if (out != nullptr) out->decode.push_back({{"ids", ids}, {"text", want.decode(ids)}});
  }
  ::testing::Test::RecordProperty(name + "_decode_sequences_with_invalid_byte_runs",
                                  n_decode_skipped);
}

fs::path temp_dir(const std::string& name) {
  fs::path d =
      fs::temp_directory_path() / ("tp_tokjson_" + std::to_string(::getpid()) + "_").append(name);
  fs::create_directories(d);
  return d;
}

std::string read_text(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Writes the files, reads them back through from_json_file (the config beside it supplies
// bos/eos), compares, and returns that tokenizer; also reads tokenizer.json alone, whose
// post-processor must supply bos and add_bos. With TP_TOKENIZER_JSON_DUMP set, leaves the files
// and expected.json there for the Python check.
Tokenizer check_round_trip(const GgufVocab& v, const std::string& name) {
  SCOPED_TRACE(name);
  const Tokenizer want = Tokenizer::from_gguf(v);
  const char* dump = std::getenv("TP_TOKENIZER_JSON_DUMP");
  const fs::path dir = dump != nullptr ? fs::path(dump) / name : temp_dir(name);
  fs::create_directories(dir);
  write_hf_tokenizer_files(v, dir, "{{ messages }}");
  Tokenizer got = Tokenizer::from_json_file((dir / "tokenizer.json").string());
  EXPECT_EQ(got.chat_template(), "{{ messages }}");
  Expected expected;
  expect_same_tokenizer(want, got, name, v.model == "llama", dump != nullptr ? &expected : nullptr);
  const Tokenizer bare = Tokenizer::from_json_string(read_text(dir / "tokenizer.json"));
  EXPECT_EQ(bare.add_bos(), want.add_bos());
  if (want.add_bos()) {
    EXPECT_EQ(bare.bos_id(), want.bos_id());
  }
  for (const std::string& text : {std::string("Hello  world\n\n<s>12"), corpus()[3]})
    EXPECT_EQ(bare.encode(text), want.encode(text));
  if (dump == nullptr) {
    fs::remove_all(dir);
    return got;
  }
  std::ofstream f(dir / "expected.json", std::ios::binary);
  f << json{{"name", name},
            {"bos_id", want.bos_id()},
            {"add_bos", want.add_bos()},
            {"encode", std::move(expected.encode)},
            {"decode", std::move(expected.decode)}}
           .dump();
  return got;
}

TEST(TokenizerJsonWriter, SmolLM2FixtureRoundTrips) {
  const Tokenizer tok = check_round_trip(smollm2_fixture_vocab(), "smollm2_fixture");
  // The written files still give the reference ids of the fixture (HF tokenizers' own).
  const json cases = load_tokenizer_fixture("smollm2.cases.json");
  for (const json& c : cases["encode"])
    EXPECT_EQ(tok.encode(c["text"].get<std::string>()), c["ids"].get<std::vector<int32_t>>());
  EXPECT_EQ(tok.eos_id(), 2);  // <|im_end|>, from tokenizer_config.json
  EXPECT_TRUE(tok.is_eos(0));  // <|endoftext|>
}

// Every pre-tokenizer name the GGUF loader knows, on the same vocabulary; with add_bos once.
TEST(TokenizerJsonWriter, EveryGgufPreTokenizerRoundTrips) {
  for (const char* pre : {"default", "gpt2", "llama-bpe", "qwen2", "smollm"}) {
    GgufVocab v = smollm2_fixture_vocab();
    v.pre = pre;
    v.add_bos = std::string(pre) == "llama-bpe";
    check_round_trip(v, std::string("smollm2_fixture_") + pre);
  }
}

TEST(TokenizerJsonWriter, SentencePieceVocabularyRoundTrips) {
  check_round_trip(spm_fixture_vocab(/*add_space_prefix=*/true), "spm_fixture_space_prefix");
  check_round_trip(spm_fixture_vocab(/*add_space_prefix=*/false), "spm_fixture");
}

TEST(TokenizerJsonWriter, SmolLM2GgufRoundTrips) {
  if (!fs::exists(kSmolModel))
    GTEST_SKIP() << kSmolModel << " not found: run bash tools/fetch_model.sh smollm2";
  check_round_trip(gguf_file_vocab(kSmolModel), "smollm2_gguf");
}

// Gemma 3: 262144 tokens, ~515k merges derived from the scores; the written files also give
// llama.cpp's ids of gemma3_gguf.cases.json, and the GGUF tokenizer's on ~180k texts made to
// stress the order of the merges. Once more with a space prefix (not Gemma's own
// setting) for the Prepend normalizer and Strip decoder on a real vocabulary.
TEST(TokenizerJsonWriter, Gemma3GgufRoundTrips) {
  if (!fs::exists(kGemmaModel))
    GTEST_SKIP() << kGemmaModel << " not found: run bash tools/fetch_model.sh gemma3-270m";
  GgufVocab v = gguf_file_vocab(kGemmaModel);
  ASSERT_EQ(v.model, "llama");
  const Tokenizer tok = check_round_trip(v, "gemma3_gguf");
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_TRUE(tok.is_eos(1));
  EXPECT_TRUE(tok.is_eos(tok.token_id("<end_of_turn>")));
  int n = 0;
  const json cases = load_tokenizer_fixture("gemma3_gguf.cases.json");
  for (const json& c : cases["cases"]) {
    std::string text;
    for (int b : c["bytes"].get<std::vector<int>>()) text += static_cast<char>(b);
    if (!valid_utf8(text)) continue;
    EXPECT_EQ(tok.encode(text), c["ids"].get<std::vector<int32_t>>()) << "text: '" << text << "'";
    EXPECT_EQ(tok.encode(text, false), c["ids_no_special"].get<std::vector<int32_t>>());
    ++n;
  }
  EXPECT_GT(n, 200);
  // Where rank order could part from SentencePiece's "leftmost among equal scores": tokens that
  // split two ways into tokens ("aaa" = "a" + "aa" = "aa" + "a"), beside copies of themselves and
  // of their parts. Every 8th such token.
  const Tokenizer want = Tokenizer::from_gguf(v);
  const std::unordered_set<std::string_view> known(v.tokens.begin(), v.tokens.end());
  int n_periodic = 0, n_multi = 0;
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const std::string_view t = v.tokens[i];
    if (v.token_types[i] != int32_t(GgufTokenType::kNormal)) continue;
    std::vector<size_t> cuts;
    for (size_t k = static_cast<size_t>(utf8_next(t, 0).len); k < t.size();
         k += static_cast<size_t>(utf8_next(t, k).len))
      if (known.contains(t.substr(0, k)) && known.contains(t.substr(k))) cuts.push_back(k);
    if (cuts.size() < 2 || n_multi++ % 8 != 0) continue;
    const std::string_view a = t.substr(0, cuts[0]), b = t.substr(cuts[0]);
    const std::string_view c = t.substr(0, cuts.back()), d = t.substr(cuts.back());
    const std::vector<std::string_view> texts[] = {{t, t},    {a, t},    {t, b},
                                                   {a, b, a}, {b, a, b}, {t, t, t},
                                                   {c, d, c}, {d, c, d}, {b, c, d, a}};
    for (const auto& parts : texts) {
      std::string text;
      for (std::string_view p : parts) text += p;
      EXPECT_EQ(tok.encode(text), want.encode(text)) << "text: '" << text << "'";
      ++n_periodic;
    }
  }
  EXPECT_GT(n_periodic, 100000);
  RecordProperty("gemma3_merge_order_texts", n_periodic);
  v.add_space_prefix = true;
  v.add_bos = false;
  check_round_trip(v, "gemma3_gguf_space_prefix");
}

TEST(TokenizerJsonWriter, RefusesWhatItCannotExpress) {
  auto message = [](const GgufVocab& v) {
    try {
      (void)hf_tokenizer_json(v);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  GgufVocab v = smollm2_fixture_vocab();
  v.model = "bert";
  EXPECT_NE(message(v).find("'bert'"), std::string::npos) << message(v);
  v.model = "gpt2";
  v.pre = "no-such-pre";
  EXPECT_NE(message(v).find("no-such-pre"), std::string::npos) << message(v);
  v = smollm2_fixture_vocab();
  v.tokens[5] = v.tokens[4];
  EXPECT_NE(message(v).find("token 5"), std::string::npos) << message(v);
  v.tokens[5] = "";
  EXPECT_NE(message(v).find("empty"), std::string::npos) << message(v);
  GgufVocab s = spm_fixture_vocab(true);
  s.scores.clear();
  EXPECT_NE(message(s).find("scores"), std::string::npos) << message(s);
  EXPECT_THROW(write_hf_tokenizer_files(smollm2_fixture_vocab(), "/nonexistent/dir"), Error);
}

// The layout pieces a reader relies on (HF files look like this).
TEST(TokenizerJsonWriter, WritesHfLayout) {
  const json g = hf_tokenizer_json(smollm2_fixture_vocab());
  EXPECT_EQ(g["model"]["type"], "BPE");
  EXPECT_EQ(g["model"]["merges"][0], json::array({"Ġ", "t"}));
  EXPECT_EQ(g["pre_tokenizer"]["pretokenizers"][0]["type"], "Digits");
  EXPECT_EQ(g["pre_tokenizer"]["pretokenizers"].back()["use_regex"], false);
  EXPECT_EQ(g["decoder"]["type"], "ByteLevel");
  EXPECT_EQ(g["added_tokens"][1], json({{"id", 1},
                                        {"content", "<|im_start|>"},
                                        {"single_word", false},
                                        {"lstrip", false},
                                        {"rstrip", false},
                                        {"normalized", false},
                                        {"special", true}}));
  const json s = hf_tokenizer_json(spm_fixture_vocab(true));
  EXPECT_EQ(s["model"]["byte_fallback"], true);
  EXPECT_EQ(s["model"]["unk_token"], "<unk>");
  EXPECT_EQ(s["normalizer"]["normalizers"][1]["type"], "Prepend");
  EXPECT_EQ(s["decoder"]["decoders"].back()["type"], "Strip");
  EXPECT_EQ(s["post_processor"]["single"][0]["SpecialToken"]["id"], "<s>");
  EXPECT_EQ(s["post_processor"]["special_tokens"]["<s>"]["ids"], json::array({1}));
  EXPECT_EQ(s["added_tokens"].back()["special"], false);  // user-defined "  "
  const json cfg = hf_tokenizer_config_json(spm_fixture_vocab(true), "{{ x }}");
  EXPECT_EQ(cfg["bos_token"], "<s>");
  EXPECT_EQ(cfg["eos_token"], "</s>");
  EXPECT_EQ(cfg["add_bos_token"], true);
  EXPECT_EQ(cfg["chat_template"], "{{ x }}");
}

}  // namespace
}  // namespace tensorpar

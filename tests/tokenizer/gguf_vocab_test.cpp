// The SentencePiece vocabulary of a real GGUF file (Gemma 3 270M, tools/fetch_model.sh
// gemma3-270m) against llama.cpp's tokenizer: gemma3_gguf.cases.json holds the ids
// llama-cpp-python gives (tools/make_tokenizer_fixtures.py gguf) for many scripts, emoji, digits,
// whitespace runs, special-token text and invalid UTF-8. Skipped when the model is not fetched.
#include <gtest/gtest.h>

#include <filesystem>

#include "fixtures_dir.h"
#include "io/gguf.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"
#include "tokenizer_fixture.h"

namespace tensorpar {
namespace {

const std::string kGemmaModel = test::fixtures_dir() + "/../../models/gemma-3-270m-q4_k_m.gguf";

// The GGUF metadata as tokenizer_loader reads it (llama.cpp's defaults for SentencePiece).
Tokenizer load_gguf_tokenizer(const std::string& path) {
  auto file = GgufFile::open(path);
  const GgufMetadata& md = file->metadata();
  GgufVocab v;
  v.model = md.get_string("tokenizer.ggml.model");
  v.tokens = md.get_string_array("tokenizer.ggml.tokens");
  v.scores = md.get_f32_array("tokenizer.ggml.scores");
  v.token_types = md.get_i32_array("tokenizer.ggml.token_type");
  v.bos_id = int32_t(md.get_u32("tokenizer.ggml.bos_token_id"));
  v.eos_id = int32_t(md.get_u32("tokenizer.ggml.eos_token_id"));
  v.unk_id = int32_t(md.get_u32_or("tokenizer.ggml.unknown_token_id", uint32_t(-1)));
  v.add_bos = md.get_bool_or("tokenizer.ggml.add_bos_token", true);
  v.add_space_prefix = md.get_bool_or("tokenizer.ggml.add_space_prefix", true);
  return Tokenizer::from_gguf(v);
}

TEST(GgufVocab, Gemma3MatchesLlamaCpp) {
  if (!std::filesystem::exists(kGemmaModel))
    GTEST_SKIP() << kGemmaModel << " not found: run tools/fetch_model.sh gemma3-270m";
  const Tokenizer tok = load_gguf_tokenizer(kGemmaModel);
  EXPECT_EQ(tok.vocab_size(), 262144);
  EXPECT_EQ(tok.bos_id(), 2);
  EXPECT_TRUE(tok.add_bos());
  EXPECT_TRUE(tok.is_eos(1));
  EXPECT_TRUE(tok.is_eos(tok.token_id("<end_of_turn>")));
  const auto cases = testing::load_tokenizer_fixture("gemma3_gguf.cases.json");
  int n = 0, n_invalid = 0;
  for (const auto& c : cases["cases"]) {
    std::string text;
    for (int b : c["bytes"].get<std::vector<int>>()) text += static_cast<char>(b);
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const auto want_plain = c["ids_no_special"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok.encode(text), want) << "text: '" << text << "'";
    EXPECT_EQ(tok.encode(text, /*allow_special=*/false), want_plain) << "text: '" << text << "'";
    // Valid text without a literal "▁" comes back from decode. (SentencePiece spells spaces "▁",
    // so a "▁" in the input decodes as a space, and so does an escaped space that llama.cpp's
    // splitting glued to an invalid lead byte and spelled as <0xNN> tokens.)
    const bool valid = utf8_lossy(text) == text;
    if (valid && text.find("\xE2\x96\x81") == std::string::npos) {
      EXPECT_EQ(tok.decode(tok.encode(text)), text);
    }
    n_invalid += !valid;
    ++n;
  }
  EXPECT_GT(n, 200);
  EXPECT_GT(n_invalid, 20);
}

// The Gemma turn format (no template in the file: chosen by its <start_of_turn> token) encodes
// to the control tokens around the plain text.
TEST(GgufVocab, Gemma3ChatPromptEncodes) {
  if (!std::filesystem::exists(kGemmaModel))
    GTEST_SKIP() << kGemmaModel << " not found: run tools/fetch_model.sh gemma3-270m";
  const Tokenizer tok = load_gguf_tokenizer(kGemmaModel);
  const ChatMessage msgs[] = {{"system", "Be brief."}, {"user", "Hi!"}};
  const std::string prompt = ChatTemplate::gemma().apply(msgs, true);
  EXPECT_EQ(prompt,
            "<bos><start_of_turn>user\nBe brief.\n\nHi!<end_of_turn>\n<start_of_turn>model\n");
  const auto ids = tok.encode(prompt);
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(ids[0], tok.bos_id());
  EXPECT_EQ(ids[1], tok.token_id("<start_of_turn>"));
  EXPECT_EQ(tok.decode(ids), prompt);
}

}  // namespace
}  // namespace tensorpar

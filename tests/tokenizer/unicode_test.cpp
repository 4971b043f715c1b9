#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/nfc.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer_fixture.h"

namespace tensorpar {
namespace {

// A naive decoder for one valid code point: the reference for utf8_next on valid input.
TEST(Unicode, EveryCodePointRoundTrips) {
  for (uint32_t cp = 0; cp < 0x110000; ++cp) {
    if (cp >= 0xD800 && cp < 0xE000) continue;
    std::string s;
    utf8_append(s, cp);
    const size_t want_len = cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    ASSERT_EQ(s.size(), want_len);
    const Utf8Char c = utf8_next(s, 0);
    ASSERT_TRUE(c.valid) << cp;
    ASSERT_EQ(c.cp, cp);
    ASSERT_EQ(size_t(c.len), want_len);
    ASSERT_EQ(utf8_lossy(s), s);
    ASSERT_EQ(utf8_incomplete_tail(s), 0u);
    for (size_t k = 1; k < s.size(); ++k) ASSERT_EQ(utf8_incomplete_tail(s.substr(0, k)), k) << cp;
  }
}

// Unicode 15 ch. 3, "U+FFFD Substitution of Maximal Subparts" (Table 3-8 and neighbours).
TEST(Unicode, LossyReplacesMaximalSubparts) {
  const std::string r = "\xEF\xBF\xBD";
  EXPECT_EQ(utf8_lossy("\x61\xF1\x80\x80\xE1\x80\xC2\x62\x80\x63\x80\xBF\x64"),
            "a" + r + r + r + "b" + r + "c" + r + r + "d");
  EXPECT_EQ(utf8_lossy("\xC0\xAF"), r + r);                  // overlong lead
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), r + r + r);          // surrogate
  EXPECT_EQ(utf8_lossy("\xF4\x90\x80\x80"), r + r + r + r);  // past U+10FFFF
  EXPECT_EQ(utf8_lossy("\xE2\x82"), r);                      // truncated
  EXPECT_EQ(utf8_incomplete_tail("ab\xE2\x82"), 2u);
  EXPECT_EQ(utf8_incomplete_tail("ab\xED\xA0"), 0u);  // can never complete
  EXPECT_EQ(utf8_incomplete_tail("ab\x80"), 0u);
  EXPECT_EQ(utf8_incomplete_tail("\xF0\x9F\x98"), 3u);
}

TEST(Unicode, CharacterClasses) {
  for (uint32_t cp : {0x61u, 0x5Au, 0xE9u, 0x3A9u, 0x4F60u, 0x1F0u, 0xAC00u, 0x10400u})
    EXPECT_TRUE(is_letter(cp)) << cp;
  for (uint32_t cp : {0x30u, 0x39u, 0x663u, 0xBDu, 0x216Bu, 0x1D7D9u})
    EXPECT_TRUE(is_number(cp)) << cp;
  for (uint32_t cp : {0x20u, 0x21u, 0x301u, 0x1F600u, 0x200Bu, 0x3002u}) {
    EXPECT_FALSE(is_letter(cp)) << cp;
    EXPECT_FALSE(is_number(cp)) << cp;
  }
  for (uint32_t cp : {0x20u, 0x09u, 0x0Au, 0x0Du, 0x85u, 0xA0u, 0x2003u, 0x3000u, 0x2028u})
    EXPECT_TRUE(is_whitespace(cp));
  for (uint32_t cp : {0x200Bu, 0xFEFFu, 0x1Cu, 0x61u}) EXPECT_FALSE(is_whitespace(cp));
}

// NFC against Python's unicodedata.normalize (fixture), plus idempotence and invalid bytes.
TEST(Nfc, MatchesPythonUnicodedata) {
  const auto cases = testing::load_tokenizer_fixture("nfc.json");
  int changed = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>(), want = c["nfc"].get<std::string>();
    EXPECT_EQ(nfc_normalize(text), want) << "text: " << text;
    EXPECT_EQ(nfc_normalize(want), want);
    changed += text != want;
  }
  EXPECT_GT(changed, 50);
  EXPECT_EQ(nfc_normalize("plain ascii \xC3\xA9"), "plain ascii \xC3\xA9");
  EXPECT_EQ(nfc_normalize("e\xCC\x81\xFF\xCC\x81"), "\xC3\xA9\xFF\xCC\x81");  // raw byte blocks
  EXPECT_EQ(canonical_combining_class(0x301), 230);
  EXPECT_EQ(canonical_combining_class('a'), 0);
}

TEST(ByteLevel, MapsEveryByteToAPrintableCharAndBack) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string spelled = byte_level_encode(all);
  std::string back;
  ASSERT_TRUE(byte_level_decode(spelled, &back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(byte_level_encode(" hello\n"), "\xC4\xA0hello\xC4\x8A");  // "Ġhello Ċ"
  EXPECT_FALSE(byte_level_decode(" ", &back));  // a raw space is not a byte-level character
}

std::vector<std::string> pieces(PreTokenizer k, std::string_view s) {
  std::vector<std::string_view> v;
  pre_tokenize(k, s, v);
  return {v.begin(), v.end()};
}

// A few hand-checked splits (the fixtures compare whole tokenizers against HF).
TEST(PreTokenizer, SplitsLikeTheRegexes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces(PreTokenizer::kGpt2, "Hello  world's 123!!"),
            (V{"Hello", " ", " world", "'s", " 123", "!!"}));
  EXPECT_EQ(pieces(PreTokenizer::kGpt2, "a  \n"), (V{"a", "  \n"}));
  EXPECT_EQ(pieces(PreTokenizer::kLlama3, "I'M 12345 ok\n\n  x"),
            (V{"I", "'M", " ", "123", "45", " ok", "\n\n", " ", " x"}));
  EXPECT_EQ(pieces(PreTokenizer::kQwen2, "x=123;\n"), (V{"x", "=", "1", "2", "3", ";\n"}));
  EXPECT_EQ(pieces(PreTokenizer::kSmolLM, "ab 12 c"), (V{"ab", " ", "1", "2", " c"}));
  EXPECT_EQ(pieces(PreTokenizer::kGpt2, ""), V{});
  EXPECT_EQ(pieces(PreTokenizer::kLlama3,
                   "\xFF\xFE"
                   "ab"),
            (V{"\xFF\xFE", "ab"}));
}

}  // namespace
}  // namespace tensorpar

#include "tokenizer/unicode.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/bpe.h"
#include "tokenizer/normalizer.h"
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

TEST(Unicode, WhitespaceProperty) {
  for (uint32_t cp : {0x20u, 0x09u, 0x0Au, 0x0Du, 0x85u, 0xA0u, 0x2003u, 0x3000u, 0x2028u})
    EXPECT_TRUE(is_whitespace(cp));
  for (uint32_t cp : {0x200Bu, 0xFEFFu, 0x1Cu, 0x61u}) EXPECT_FALSE(is_whitespace(cp));
}

// Normal forms and lower-casing against Python's unicodedata.normalize / str.lower (fixture),
// plus idempotence and invalid bytes.
TEST(Normalize, MatchesPython) {
  using K = NormalizerStep::Kind;
  const auto cases = testing::load_tokenizer_fixture("nfc.json");
  int changed = 0;
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>(), want = c["nfc"].get<std::string>();
    EXPECT_EQ(unicode_normalize(text, K::kNfc), want) << "text: " << text;
    EXPECT_EQ(unicode_normalize(want, K::kNfc), want);
    for (const auto& [key, kind] : {std::pair{"nfkc", K::kNfkc},
                                    {"nfd", K::kNfd},
                                    {"nfkd", K::kNfkd},
                                    {"lower", K::kLowercase}})
      if (c.contains(key)) {
        EXPECT_EQ(unicode_normalize(text, kind), c[key].get<std::string>()) << key << ": " << text;
      }
    changed += text != want;
  }
  EXPECT_GT(changed, 50);
  EXPECT_EQ(unicode_normalize("plain ascii \xC3\xA9", K::kNfc), "plain ascii \xC3\xA9");
  // Invalid bytes split the text into runs normalized on their own.
  EXPECT_EQ(unicode_normalize("e\xCC\x81\xFF\xCC\x81", K::kNfc), "\xC3\xA9\xFF\xCC\x81");
  EXPECT_EQ(unicode_normalize("\xEF\xAC\x81\xFF", K::kNfkc), "fi\xFF");  // U+FB01 ligature
  EXPECT_EQ(unicode_normalize("ABC \xCE\xA3", K::kLowercase), "abc \xCF\x83");
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

std::vector<std::string> pieces(std::string_view gguf_pre, std::string_view s) {
  bool ignore_merges = false;
  const PreTokenizer p = pre_tokenizer_from_gguf_name(gguf_pre, &ignore_merges);
  std::vector<std::string> v;
  p.split(s, true, v);
  return v;
}

std::vector<std::string> split(PreTokenizerStep step, std::string_view s, bool first = true) {
  PreTokenizer p;
  p.add(std::move(step));
  std::vector<std::string> v;
  p.split(s, first, v);
  return v;
}

// A few hand-checked splits (the fixtures compare whole tokenizers against HF).
TEST(PreTokenizer, SplitsLikeTheRegexes) {
  using V = std::vector<std::string>;
  EXPECT_EQ(pieces("gpt2", "Hello  world's 123!!"),
            (V{"Hello", " ", " world", "'s", " 123", "!!"}));
  EXPECT_EQ(pieces("gpt2", "a  \n"), (V{"a", "  \n"}));
  EXPECT_EQ(pieces("llama-bpe", "I'M 12345 ok\n\n  x"),
            (V{"I", "'M", " ", "123", "45", " ok", "\n\n", " ", " x"}));
  EXPECT_EQ(pieces("qwen2", "x=123;\n"), (V{"x", "=", "1", "2", "3", ";\n"}));
  EXPECT_EQ(pieces("smollm", "ab 12 c"), (V{"ab", " ", "1", "2", " c"}));
  EXPECT_EQ(pieces("gpt2", ""), V{});
  EXPECT_EQ(pieces("llama-bpe",
                   "\xFF\xFE"
                   "ab"),
            (V{"\xFF\xFE", "ab"}));
}

// Each Split behaviour on "a-b--c" with the pattern "-" (HF's documented examples), inversion,
// Metaspace's prepend schemes and split, and bad patterns.
TEST(PreTokenizer, SplitBehavioursAndMetaspace) {
  using V = std::vector<std::string>;
  using B = SplitBehavior;
  EXPECT_EQ(split(PreTokenizer::split_step("-", B::kRemoved), "a-b--c"), (V{"a", "b", "c"}));
  EXPECT_EQ(split(PreTokenizer::split_step("-", B::kIsolated), "a-b--c"),
            (V{"a", "-", "b", "-", "-", "c"}));
  EXPECT_EQ(split(PreTokenizer::split_step("-", B::kMergedWithPrevious), "a-b--c"),
            (V{"a-", "b-", "-", "c"}));
  EXPECT_EQ(split(PreTokenizer::split_step("-", B::kMergedWithNext), "a-b--c"),
            (V{"a", "-b", "-", "-c"}));
  EXPECT_EQ(split(PreTokenizer::split_step("-", B::kContiguous), "a-b--c"),
            (V{"a", "-", "b", "--", "c"}));
  EXPECT_EQ(split(PreTokenizer::split_step("-", B::kRemoved, true), "a-b--c"), (V{"-", "-", "-"}));
  PreTokenizerStep ms;
  ms.kind = PreTokenizerStep::Kind::kMetaspace;
  ms.replacement = "\xE2\x96\x81";
  ms.flag = true;
  EXPECT_EQ(split(ms, "Hey  you"), (V{"\xE2\x96\x81Hey", "\xE2\x96\x81", "\xE2\x96\x81you"}));
  ms.prepend = PreTokenizerStep::Prepend::kFirst;
  EXPECT_EQ(split(ms, "Hey you", false), (V{"Hey", "\xE2\x96\x81you"}));
  ms.flag = false;
  ms.prepend = PreTokenizerStep::Prepend::kNever;
  EXPECT_EQ(split(ms, "Hey you"), (V{"Hey\xE2\x96\x81you"}));
  EXPECT_THROW(Regex("(unclosed"), Error);
}

}  // namespace
}  // namespace tensorpar

// libFuzzer target: an HF tokenizer.json (and, after a NUL byte, a tokenizer_config.json) from
// arbitrary bytes through Tokenizer::from_json_string; a tokenizer that loads then encodes a few
// texts (ASCII, multi-byte UTF-8, special-token text, and invalid UTF-8 bytes taken from the
// input) with and without special tokens, decodes the ids whole and streamed, and decodes ids
// drawn from the input, so the BPE / Unigram / WordPiece models, normalizers, pre-tokenizers,
// regexes and decoders all run on what the file configured.
// Any crash, sanitizer report or exception other than tensorpar::Error is a bug; so is an id
// from encode that decode refuses, a decode that is not valid UTF-8, or streamed chunks of an
// encoded text that differ from its decode.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_input.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace {

using namespace tensorpar;

void check_utf8(const std::string& s, const char* what) {
  if (utf8_lossy(s) != s) fuzz::fail(what);
}

void round_trip(const Tokenizer& t, std::string_view text) {
  for (const bool special : {true, false}) {
    std::vector<int32_t> ids;
    try {
      ids = t.encode(text, special);  // may refuse: e.g. a character with no token and no unk
    } catch (const Error& e) {
      fuzz::refused(e);
      continue;
    }
    for (const int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) fuzz::fail("encode returned an id outside the vocab");
    std::string whole;
    try {
      whole = t.decode(ids);
    } catch (const Error&) {
      fuzz::fail("decode refused an id that encode returned");
    }
    check_utf8(whole, "decode returned invalid UTF-8");
    StreamDecoder stream(t);
    std::string streamed;
    for (const int32_t id : ids) {
      const std::string piece = stream.push(id);
      check_utf8(piece, "StreamDecoder::push returned invalid UTF-8");
      streamed += piece;
    }
    streamed += stream.flush();
    check_utf8(streamed, "StreamDecoder::flush returned invalid UTF-8");
    if (streamed != whole) {
      std::fprintf(stderr, "streamed '%s'\nwhole    '%s'\n", streamed.c_str(), whole.c_str());
      fuzz::fail("StreamDecoder's chunks differ from decode");
    }
  }
  (void)t.normalize(text);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto fields = fuzz::split_fields(fuzz::as_text(data, size), 2);
  const std::string_view json = fields[0];
  const std::string_view config = fields.size() > 1 ? fields[1] : std::string_view();
  try {
    const Tokenizer t = Tokenizer::from_json_string(json, config);
    round_trip(t, "Hello, world! It's 2024: 1234567 tokens\tand\nnew  lines. ");
    round_trip(t, "h\xC3\xA9llo w\xC3\xB6rld \xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E "
                  "\xF0\x9F\xA4\x97 \xCE\xA9\xE2\x80\x8B\xEF\xBC\xA1 \xE1\xBA\x9E");
    round_trip(t, "<|im_start|>user\n<s>hi</s>[CLS] x [SEP]<|endoftext|><unk>");
    round_trip(t, "\xFF\xFE\xC3(\xE2\x82 \xF0\x9F\x98 \xED\xA0\x80 \xC0\xAF");
    // The input's own bytes: its tokens' spellings, escapes and arbitrary (invalid) UTF-8.
    round_trip(t, json.substr(0, 96));
    round_trip(t, json.substr(json.size() - std::min<size_t>(json.size(), 96)));
    // Ids drawn from the input: a bad id is an Error, a good one decodes to valid UTF-8.
    std::vector<int32_t> ids;
    for (size_t i = 0; i + 1 < json.size() && ids.size() < 32; i += 7)
      ids.push_back(int32_t((uint8_t(json[i]) << 8 | uint8_t(json[i + 1])) % (t.vocab_size() + 1)));
    try {
      check_utf8(t.decode(ids), "decode returned invalid UTF-8");
    } catch (const Error& e) {
      fuzz::refused(e);
    }
    for (const int32_t id : ids) {
      try {
        (void)t.token_bytes(id);
        const std::string spelled = t.token_text(id);
        (void)t.token_id(spelled);
        (void)t.is_eos(id);
        (void)t.is_special(id);
      } catch (const Error& e) {
        fuzz::refused(e);
      }
    }
    if (!t.chat_template().empty()) {
      try {
        const ChatMessage msgs[] = {{"system", "s"}, {"user", "u"}};
        round_trip(t, ChatTemplate::detect(t.chat_template()).apply(msgs, true));
      } catch (const Error& e) {
        fuzz::refused(e);
      }
    }
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  return 0;
}

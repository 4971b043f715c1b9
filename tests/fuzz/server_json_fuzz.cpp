// libFuzzer target: the OpenAI server's request bodies from arbitrary bytes: parse_json_body,
// then both parse_chat_request and parse_completion_request on what it accepts; a request that
// passes then goes through check_prompt_ids and resolve_max_tokens with small vocab and context
// sizes, its chat messages through the ChatML template, and every refusal is rendered as the
// error object the server sends.
// Any crash, sanitizer report or exception other than tensorpar::Error is a bug; here the
// parsers may throw only ProtocolError (the server's 4xx answer): anything else would reach the
// client as a 500. So is a refusal whose JSON cannot be sent, or a budget outside the context.
#include <string>
#include <vector>

#include "fuzz_input.h"
#include "serve/openai_protocol.h"
#include "tokenizer/chat_template.h"

namespace {

using namespace tensorpar;

void answer(const ProtocolError& e) {
  fuzz::refused(e);
  if (e.status < 400 || e.status > 599) fuzz::fail("a refusal with a status that is not 4xx/5xx");
  (void)sse_event(e.to_json());  // what the server writes; must not throw on any message
}

void serve(const CompletionRequest& r) {
  try {
    check_prompt_ids(r.prompt_ids, 256);
  } catch (const ProtocolError& e) {
    answer(e);
  }
  for (const int64_t context : {int64_t(1), int64_t(16), int64_t(4096)}) {
    for (const int64_t prompt : {int64_t(1), int64_t(r.prompt_ids.size()), int64_t(15)}) {
      try {
        const int64_t m = resolve_max_tokens(r, prompt, context);
        if (m < 1 || m > context - prompt) fuzz::fail("resolve_max_tokens outside the context");
      } catch (const ProtocolError& e) {
        answer(e);
      }
    }
  }
  if (r.kind == ApiKind::kChat) {
    (void)ChatTemplate::chatml().apply(r.messages, true);
    (void)ChatTemplate::gemma().apply(r.messages, false);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json body;
  try {
    body = parse_json_body(fuzz::as_text(data, size));
  } catch (const ProtocolError& e) {
    answer(e);
    return 0;
  }
  try {
    serve(parse_chat_request(body));
  } catch (const ProtocolError& e) {
    answer(e);
  }
  try {
    serve(parse_completion_request(body));
  } catch (const ProtocolError& e) {
    answer(e);
  }
  return 0;
}

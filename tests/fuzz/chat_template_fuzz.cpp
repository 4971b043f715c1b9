// libFuzzer target: chat templates. The input is NUL-separated fields: a Jinja chat template
// text (as tokenizer_config.json or a GGUF file carries it), then message contents. The template
// goes through ChatTemplate::detect (family, default system prompt); the detected template and the
// three built-in families render the messages (roles cycling system / user / assistant / another,
// starting where the template's first byte says), with and without add_generation_prompt, and
// the empty and one-message conversations.
// Any crash, sanitizer report or exception other than tensorpar::Error is a bug; so is a rendering
// that lacks a message's text.
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz_input.h"
#include "tokenizer/chat_template.h"

namespace {

using namespace tensorpar;

void render(const ChatTemplate& t, const std::vector<ChatMessage>& msgs) {
  for (const bool gen : {true, false}) {
    const std::string all = t.apply(msgs, gen);
    (void)t.apply({}, gen);
    if (!msgs.empty()) (void)t.apply(std::span(msgs).first(1), gen);
    // Every message's text is in the prompt (Gemma and Llama 3 trim it; whitespace-only
    // contents vanish). Gemma folds a leading system message into the first turn after it, so
    // one alone is not rendered (as its Jinja template does).
    const bool gemma_system_alone =
        t.kind == ChatTemplateKind::kGemma && msgs.size() == 1 && msgs[0].role == "system";
    for (const ChatMessage& m : msgs) {
      if (gemma_system_alone) break;
      const size_t b = m.content.find_first_not_of(" \t\n\r\f\v");
      if (b == std::string::npos) continue;
      const size_t e = m.content.find_last_not_of(" \t\n\r\f\v");
      if (all.find(std::string_view(m.content).substr(b, e - b + 1)) == std::string::npos)
        fuzz::fail("a message's content is missing from the rendered prompt");
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto fields = fuzz::split_fields(fuzz::as_text(data, size), 9);
  const std::string_view source = fields[0];
  static const char* const kRoles[] = {"system", "user", "assistant", "tool"};
  const size_t first_role = source.empty() ? 0 : uint8_t(source[0]) % 4;
  std::vector<ChatMessage> msgs;
  for (size_t i = 1; i < fields.size(); ++i)
    msgs.push_back({kRoles[(first_role + i - 1) % 4], std::string(fields[i])});
  try {
    const ChatTemplate t = ChatTemplate::detect(source);
    if (t.default_system.find("<|im_end|>") != std::string::npos)
      fuzz::fail("the default system prompt runs past its <|im_end|>");
    render(t, msgs);
  } catch (const Error& e) {
    fuzz::refused(e);
  }
  for (const ChatTemplate& t : {ChatTemplate::chatml(), ChatTemplate::llama3(), ChatTemplate::gemma()})
    render(t, msgs);
  return 0;
}

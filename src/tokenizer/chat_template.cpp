// Chat template detection and rendering. Detection looks for each family's markers and, for
// templates that add a default system prompt, pulls that prompt out of its string literal.
#include "tokenizer/chat_template.h"

#include "core/error.h"

namespace tensorpar {
namespace {

// The literal text after "<|im_start|>system" + newline up to "<|im_end|>", when the template
// inserts it for conversations without a system message. Handles both a real newline and the
// Jinja escape "\n" inside the string literal.
std::string default_system_prompt(std::string_view t) {
  if (t.find("!= 'system'") == std::string_view::npos &&
      t.find("!= \"system\"") == std::string_view::npos)
    return "";
  constexpr std::string_view kOpen = "<|im_start|>system";
  const size_t at = t.find(kOpen);
  if (at == std::string_view::npos) return "";
  size_t p = at + kOpen.size();
  if (t.compare(p, 2, "\\n") == 0) {
    p += 2;
  } else if (p < t.size() && t[p] == '\n') {
    p += 1;
  } else {
    return "";
  }
  const size_t end = t.find("<|im_end|>", p);
  if (end == std::string_view::npos) return "";
  const std::string_view lit = t.substr(p, end - p);
  // Only a plain literal: no Jinja expressions or string concatenation inside.
  if (lit.find_first_of("{}'\"+") != std::string_view::npos) return "";
  std::string out;
  for (size_t i = 0; i < lit.size(); ++i) {
    if (lit[i] == '\\' && i + 1 < lit.size() && lit[i + 1] == 'n') {
      out += '\n';
      ++i;
    } else {
      out += lit[i];
    }
  }
  return out;
}

std::string_view trim(std::string_view s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

// Gemma's template: bos always; a leading system message becomes "<content>\n\n" at the start of
// the first turn; "assistant" is spelled "model"; contents are trimmed.
std::string ChatTemplate::apply_gemma(std::span<const ChatMessage> messages,
                                      bool add_generation_prompt) const {
  std::string out = prefix;
  std::string first_prefix;
  size_t begin = 0;
  if (!messages.empty() && messages[0].role == "system") {
    first_prefix = messages[0].content + "\n\n";
    begin = 1;
  }
  for (size_t i = begin; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    out += "<start_of_turn>" + (m.role == "assistant" ? std::string("model") : m.role) + "\n";
    if (i == begin) out += first_prefix;
    out += std::string(trim(m.content)) + "<end_of_turn>\n";
  }
  if (add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

ChatTemplate ChatTemplate::detect(std::string_view t) {
  if (t.find("<|start_header_id|>") != std::string_view::npos) return llama3();
  if (t.find("<start_of_turn>") != std::string_view::npos) return gemma();
  if (t.find("<|im_start|>") != std::string_view::npos) {
    ChatTemplate c = chatml();
    c.default_system = default_system_prompt(t);
    return c;
  }
  TP_CHECK(false, "[ChatTemplate::detect] unknown chat template: got '",
           std::string(t.substr(0, 120)), t.size() > 120 ? "..." : "",
           "', expected a ChatML (<|im_start|>), Llama 3 (<|start_header_id|>) or Gemma "
           "(<start_of_turn>) template");
  return chatml();
}

std::string ChatTemplate::apply(std::span<const ChatMessage> messages,
                                bool add_generation_prompt) const {
  if (kind == ChatTemplateKind::kGemma) return apply_gemma(messages, add_generation_prompt);
  // The real templates emit the prefix and the default system prompt with the first message,
  // so an empty conversation gets neither.
  std::string out = messages.empty() ? "" : prefix;
  if (kind == ChatTemplateKind::kChatML) {
    if (!default_system.empty() && !messages.empty() && messages[0].role != "system")
      out += "<|im_start|>system\n" + default_system + "<|im_end|>\n";
    for (const ChatMessage& m : messages)
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
  } else {
    // Llama 3's template trims each message's content.
    for (const ChatMessage& m : messages)
      out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" +
             std::string(trim(m.content)) + "<|eot_id|>";
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
  }
  return out;
}

}  // namespace tensorpar

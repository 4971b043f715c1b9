// Chat prompt formatting for the two template families our models use, ChatML
// (<|im_start|>role\n...<|im_end|>\n: SmolLM2-Instruct, Qwen2) and Llama 3
// (<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>), chosen from the model's Jinja
// chat template by its markers rather than by running Jinja.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace tensorpar {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatTemplateKind { kChatML, kLlama3 };

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kChatML;
  // Inserted as a system message when the conversation has none (SmolLM2's and Qwen2's templates
  // do this); empty for none.
  std::string default_system;
  // Text the template puts first (Llama 3: "<|begin_of_text|>"); encode the result without
  // adding another BOS.
  std::string prefix;

  // Recognises a Jinja chat template by its markers; throws Error for an unknown family.
  static ChatTemplate detect(std::string_view jinja_template);
  static ChatTemplate chatml() { return {ChatTemplateKind::kChatML, "", ""}; }
  static ChatTemplate llama3() { return {ChatTemplateKind::kLlama3, "", "<|begin_of_text|>"}; }

  // The prompt text; add_generation_prompt appends the opening of an assistant turn.
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
};

}  // namespace tensorpar

// Chat prompt formatting for the template families our models use, ChatML
// (<|im_start|>role\n...<|im_end|>\n: SmolLM2-Instruct, Qwen2), Llama 3
// (<|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>) and Gemma
// (<start_of_turn>user\n...<end_of_turn>\n, "model" for the assistant, the system prompt folded
// into the first user turn), chosen from the model's Jinja chat template by its markers rather than
// by running Jinja.
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace tensorpar {

struct ChatMessage {
  std::string role;  // "system", "user", "assistant"
  std::string content;
};

enum class ChatTemplateKind { kChatML, kLlama3, kGemma };

struct ChatTemplate {
  ChatTemplateKind kind = ChatTemplateKind::kChatML;
  // Inserted as a system message when the conversation has none (SmolLM2's and Qwen2's templates
  // do this); empty for none.
  std::string default_system;
  // Text the template puts first (Llama 3: "<|begin_of_text|>", Gemma: "<bos>"); encode the
  // result without adding another BOS.
  std::string prefix;

  // Recognises a Jinja chat template by its markers; throws Error for an unknown family.
  static ChatTemplate detect(std::string_view jinja_template);
  static ChatTemplate chatml() { return {ChatTemplateKind::kChatML, "", ""}; }
  static ChatTemplate llama3() { return {ChatTemplateKind::kLlama3, "", "<|begin_of_text|>"}; }
  static ChatTemplate gemma() { return {ChatTemplateKind::kGemma, "", "<bos>"}; }

  // The prompt text; add_generation_prompt appends the opening of an assistant turn.
  std::string apply(std::span<const ChatMessage> messages, bool add_generation_prompt) const;

 private:
  std::string apply_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) const;
};

}  // namespace tensorpar

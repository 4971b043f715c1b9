#include "tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "tokenizer_fixture.h"

namespace tensorpar {
namespace {

// Each rendering of a real template (SmolLM2 from its GGUF; Llama 3, Qwen2 and Gemma 3 Instruct) by
// Python's jinja2, kept in chat_templates.json, equals ours.
TEST(ChatTemplate, MatchesJinjaRenderings) {
  const auto cases = testing::load_tokenizer_fixture("chat_templates.json");
  int n = 0;
  for (const auto& c : cases) {
    const ChatTemplate t = ChatTemplate::detect(c["template"].get<std::string>());
    std::vector<ChatMessage> msgs;
    for (const auto& m : c["messages"])
      msgs.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    EXPECT_EQ(t.apply(msgs, c["add_generation_prompt"].get<bool>()), c["text"].get<std::string>())
        << c["template_name"] << " with " << msgs.size() << " messages";
    ++n;
  }
  EXPECT_EQ(n, 30);
}

TEST(ChatTemplate, DetectsFamiliesAndDefaultSystem) {
  const auto j = testing::load_tokenizer_fixture("smollm2_gguf_vocab.json");
  const ChatTemplate smol = ChatTemplate::detect(j["chat_template"].get<std::string>());
  EXPECT_EQ(smol.kind, ChatTemplateKind::kChatML);
  EXPECT_EQ(smol.default_system,
            "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  const ChatTemplate llama = ChatTemplate::detect("{{ '<|start_header_id|>' + role }}");
  EXPECT_EQ(llama.kind, ChatTemplateKind::kLlama3);
  EXPECT_EQ(ChatTemplate::detect("{{ '<start_of_turn>' + role }}").kind, ChatTemplateKind::kGemma);
  const ChatMessage msgs[] = {{"user", "Hi"}};
  EXPECT_EQ(ChatTemplate::chatml().apply(msgs, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate::llama3().apply(msgs, false),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>");
  try {
    (void)ChatTemplate::detect("{% for m in messages %}[INST] {{ m.content }} [/INST]{% endfor %}");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown chat template"), std::string::npos) << e.what();
  }
}

// The rendered ChatML prompt encodes to the special ids around plain text.
TEST(ChatTemplate, EncodesWithSpecialTokens) {
  const Tokenizer tok = testing::load_smollm2_gguf_fixture();
  const ChatMessage msgs[] = {{"system", "Be brief."}, {"user", "What is 2+2?"}};
  const auto ids = tok.encode(ChatTemplate::chatml().apply(msgs, true));
  int n_start = 0, n_end = 0;
  for (int32_t id : ids) {
    n_start += id == tok.token_id("<|im_start|>");
    n_end += id == tok.token_id("<|im_end|>");
  }
  EXPECT_EQ(n_start, 3);
  EXPECT_EQ(n_end, 2);
  EXPECT_EQ(tok.decode(ids), ChatTemplate::chatml().apply(msgs, true));
}

}  // namespace
}  // namespace tensorpar

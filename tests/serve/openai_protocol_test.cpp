// OpenAI request parsing (every class of bad input gets a 400 naming its field) and the shapes of
// the response, chunk, logprobs, usage, model-list and error objects, against JSON written out
// by hand from OpenAI's API reference.
#include "serve/openai_protocol.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

namespace tensorpar {
namespace {

using nlohmann::json;

json chat_body(json extra = json::object()) {
  json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

json completion_body(json extra = json::object()) {
  json b = {{"prompt", "Once upon"}};
  for (auto& [k, v] : extra.items()) b[k] = v;
  return b;
}

// The ProtocolError a parse throws, or a failure when it throws none.
ProtocolError error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const ProtocolError& e) {
    return e;
  }
  ADD_FAILURE() << "no ProtocolError";
  return ProtocolError(0, "");
}

TEST(OpenAIParse, MinimalChatGetsOpenAIDefaults) {
  const CompletionRequest r = parse_chat_request(chat_body());
  EXPECT_EQ(r.kind, ApiKind::kChat);
  ASSERT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].role, "user");
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_EQ(r.model, "");
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.include_usage);
  EXPECT_FALSE(r.seed_given);
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 1.0f);
  EXPECT_EQ(r.params.sampling.top_k, 0);
  EXPECT_FLOAT_EQ(r.params.sampling.min_p, 0.0f);
  EXPECT_EQ(r.params.top_logprobs, -1);
  EXPECT_TRUE(r.params.stop.empty());
  EXPECT_FALSE(r.params.ignore_eos);
}

TEST(OpenAIParse, ChatReadsEveryField) {
  const json body = {
      {"model", "smol"},
      {"messages",
       {{{"role", "developer"}, {"content", "be brief"}},
        {{"role", "user"},
         {"content",
          {{{"type", "text"}, {"text", "Hello, "}}, {{"type", "text"}, {"text", "world"}}}}},
        {{"role", "assistant"}, {"content", nullptr}},
        {{"role", "user"}, {"content", "again"}, {"name", "bob"}}}},
      {"max_tokens", 50},
      {"max_completion_tokens", 20},
      {"temperature", 0.5},
      {"top_p", 0.9},
      {"top_k", 40},
      {"min_p", 0.05},
      {"seed", 42},
      {"stop", {"###", "END"}},
      {"frequency_penalty", 0.5},
      {"presence_penalty", -1},
      {"repetition_penalty", 1.2},
      {"logprobs", true},
      {"top_logprobs", 3},
      {"n", 1},
      {"stream", true},
      {"stream_options", {{"include_usage", true}}},
      {"ignore_eos", true},
      {"user", "someone"},
      {"some_future_field", {1, 2}},
      {"logit_bias", json::object()},
      {"tools", json::array()},
      {"response_format", {{"type", "text"}}}};
  const CompletionRequest r = parse_chat_request(body);
  EXPECT_EQ(r.model, "smol");
  ASSERT_EQ(r.messages.size(), 4u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[0].content, "be brief");
  EXPECT_EQ(r.messages[1].content, "Hello, world");
  EXPECT_EQ(r.messages[2].role, "assistant");
  EXPECT_EQ(r.messages[2].content, "");
  EXPECT_EQ(r.messages[3].content, "again");
  EXPECT_EQ(r.max_tokens, 20);  // max_completion_tokens wins over the deprecated max_tokens
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 0.9f);
  EXPECT_EQ(r.params.sampling.top_k, 40);
  EXPECT_FLOAT_EQ(r.params.sampling.min_p, 0.05f);
  EXPECT_EQ(r.params.sampling.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_EQ(r.params.stop, (std::vector<std::string>{"###", "END"}));
  EXPECT_FLOAT_EQ(r.params.sampling.frequency_penalty, 0.5f);
  EXPECT_FLOAT_EQ(r.params.sampling.presence_penalty, -1.0f);
  EXPECT_FLOAT_EQ(r.params.sampling.repetition_penalty, 1.2f);
  EXPECT_EQ(r.params.top_logprobs, 3);
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_TRUE(r.params.ignore_eos);
}

TEST(OpenAIParse, NullMeansAbsentAndEdgeValuesAreAccepted) {
  const CompletionRequest r = parse_chat_request(chat_body({{"temperature", nullptr},
                                                            {"max_tokens", nullptr},
                                                            {"stop", nullptr},
                                                            {"stream_options", nullptr},
                                                            {"top_p", 1},
                                                            {"top_k", -1},
                                                            {"min_p", 0},
                                                            {"seed", -1},
                                                            {"frequency_penalty", -2},
                                                            {"presence_penalty", 2},
                                                            {"logprobs", true}}));
  EXPECT_FLOAT_EQ(r.params.sampling.temperature, 1.0f);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_FLOAT_EQ(r.params.sampling.top_p, 1.0f);
  EXPECT_EQ(r.params.sampling.top_k, 0);  // -1 is vLLM's "off"
  EXPECT_EQ(r.params.sampling.seed,
            std::numeric_limits<uint64_t>::max());  // -1 as two's complement
  EXPECT_EQ(r.params.top_logprobs, 0);  // logprobs without top_logprobs: the chosen token only
  EXPECT_FLOAT_EQ(parse_chat_request(chat_body({{"temperature", 0}})).params.sampling.temperature,
                  0.0f);
  EXPECT_FLOAT_EQ(parse_chat_request(chat_body({{"temperature", 2}})).params.sampling.temperature,
                  2.0f);
  EXPECT_EQ(parse_chat_request(chat_body({{"top_k", 0}})).params.sampling.top_k, 0);
  EXPECT_EQ(parse_chat_request(chat_body({{"stop", "x"}})).params.stop,
            std::vector<std::string>{"x"});
  EXPECT_EQ(parse_chat_request(chat_body({{"max_tokens", 7}})).max_tokens, 7);
  EXPECT_EQ(parse_chat_request(chat_body({{"logprobs", false}})).params.top_logprobs, -1);
  EXPECT_EQ(
      parse_chat_request(chat_body({{"logprobs", true}, {"top_logprobs", 20}})).params.top_logprobs,
      20);
}

struct BadCase {
  std::string body;   // JSON text
  std::string param;  // the field the error must name
};

// A valid chat body with `extra` fields ("\"temperature\": 3") added.
std::string chat_with(const std::string& extra) {
  return R"({"messages": [{"role": "user", "content": "hi"}], )" + extra + "}";
}

TEST(OpenAIParse, EveryBadChatInputIs400NamingItsField) {
  const std::vector<BadCase> cases = {
      {R"({})", "messages"},
      {R"({"messages": "hi"})", "messages"},
      {R"({"messages": []})", "messages"},
      {R"({"messages": ["hi"]})", "messages[0]"},
      {R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {R"({"messages": [{"role": 1, "content": "hi"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "tool", "content": "hi"}]})", "messages[0].role"},
      {R"({"messages": [{"role": "user", "content": "hi"}, {"role": "robot", "content": "x"}]})",
       "messages[1].role"},
      {R"({"messages": [{"role": "user"}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "x"}]}]})",
       "messages[0].content[0].type"},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       "messages[0].content[0].text"},
      {R"({"messages": [{"role": "user", "content": ["hi"]}]})", "messages[0].content[0]"},
      {chat_with(R"("model": 42)"), "model"},
      {chat_with(R"("temperature": "hot")"), "temperature"},
      {chat_with(R"("temperature": true)"), "temperature"},
      {chat_with(R"("temperature": 2.01)"), "temperature"},
      {chat_with(R"("temperature": -0.1)"), "temperature"},
      {chat_with(R"("top_p": 0)"), "top_p"},
      {chat_with(R"("top_p": 1.5)"), "top_p"},
      {chat_with(R"("top_k": -2)"), "top_k"},
      {chat_with(R"("top_k": 1.5)"), "top_k"},
      {chat_with(R"("top_k": "5")"), "top_k"},
      {chat_with(R"("min_p": 1)"), "min_p"},
      {chat_with(R"("min_p": -0.1)"), "min_p"},
      {chat_with(R"("frequency_penalty": 2.5)"), "frequency_penalty"},
      {chat_with(R"("presence_penalty": -3)"), "presence_penalty"},
      {chat_with(R"("repetition_penalty": 0)"), "repetition_penalty"},
      {chat_with(R"("max_tokens": 0)"), "max_tokens"},
      {chat_with(R"("max_tokens": -5)"), "max_tokens"},
      {chat_with(R"("max_tokens": 1.5)"), "max_tokens"},
      {chat_with(R"("max_tokens": "10")"), "max_tokens"},
      {chat_with(R"("max_tokens": 18446744073709551615)"), "max_tokens"},
      {chat_with(R"("max_completion_tokens": 0)"), "max_completion_tokens"},
      {chat_with(R"("seed": 1.5)"), "seed"},
      {chat_with(R"("seed": "1")"), "seed"},
      {chat_with(R"("stop": ["a", "b", "c", "d", "e"])"), "stop"},
      {chat_with(R"("stop": 42)"), "stop"},
      {chat_with(R"("stop": [1])"), "stop"},
      {chat_with(R"("stop": "")"), "stop"},
      {chat_with(R"("n": 2)"), "n"},
      {chat_with(R"("n": 0)"), "n"},
      {chat_with(R"("n": "1")"), "n"},
      {chat_with(R"("logprobs": "yes")"), "logprobs"},
      {chat_with(R"("logprobs": true, "top_logprobs": 21)"), "top_logprobs"},
      {chat_with(R"("logprobs": true, "top_logprobs": -1)"), "top_logprobs"},
      {chat_with(R"("top_logprobs": 2)"), "top_logprobs"},
      {chat_with(R"("logprobs": false, "top_logprobs": 2)"), "top_logprobs"},
      {chat_with(R"("stream": "true")"), "stream"},
      {chat_with(R"("stream_options": {"include_usage": true})"), "stream_options"},
      {chat_with(R"("stream": true, "stream_options": 5)"), "stream_options"},
      {chat_with(R"("stream": true, "stream_options": {"include_usage": "yes"})"),
       "stream_options.include_usage"},
      {chat_with(R"("ignore_eos": 1)"), "ignore_eos"},
      {chat_with(R"("user": 5)"), "user"},
      {chat_with(R"("tools": [{"type": "function"}])"), "tools"},
      {chat_with(R"("response_format": {"type": "json_object"})"), "response_format"},
      {chat_with(R"("logit_bias": {"15": 5})"), "logit_bias"},
  };
  for (const BadCase& c : cases) {
    const json body = json::parse(c.body);
    const ProtocolError e = error_of([&] { parse_chat_request(body); });
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.what();
    EXPECT_EQ(e.type, "invalid_request_error");
    // Messages say what came and what was expected.
    EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos) << e.what();
  }
}

TEST(OpenAIParse, RangeMessagesShowValueAndBounds) {
  const ProtocolError e = error_of([] { parse_chat_request(chat_body({{"temperature", 3}})); });
  EXPECT_STREQ(e.what(), "temperature: got 3, expected a number in [0, 2]");
  const ProtocolError n = error_of([] { parse_chat_request(chat_body({{"n", 2}})); });
  EXPECT_STREQ(n.what(), "n: got 2, expected 1 (one choice per request)");
  const ProtocolError t = error_of([] { parse_chat_request(chat_body({{"top_p", "x"}})); });
  EXPECT_STREQ(t.what(), "top_p: got a string, expected a number in (0, 1]");
}

TEST(OpenAIParse, CompletionPrompts) {
  CompletionRequest r = parse_completion_request(completion_body());
  EXPECT_EQ(r.kind, ApiKind::kCompletion);
  EXPECT_EQ(r.prompt, "Once upon");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_EQ(r.params.top_logprobs, -1);

  r = parse_completion_request(json::parse(R"({"prompt": [1, 2, 3]})"));
  EXPECT_TRUE(r.prompt_is_ids);
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{1, 2, 3}));

  r = parse_completion_request(json::parse(R"({"prompt": ["only one"]})"));  // a batch of one
  EXPECT_EQ(r.prompt, "only one");
  EXPECT_FALSE(r.prompt_is_ids);

  r = parse_completion_request(json::parse(R"({"prompt": [[7, 8]]})"));
  EXPECT_EQ(r.prompt_ids, (std::vector<int32_t>{7, 8}));

  r = parse_completion_request(
      completion_body({{"logprobs", 0}, {"max_tokens", 5}, {"echo", false}, {"best_of", 1}}));
  EXPECT_EQ(r.params.top_logprobs, 0);
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(parse_completion_request(completion_body({{"logprobs", 5}})).params.top_logprobs, 5);
}

TEST(OpenAIParse, EveryBadCompletionInputIs400NamingItsField) {
  const std::vector<BadCase> cases = {
      {R"({})", "prompt"},
      {R"({"prompt": 42})", "prompt"},
      {R"({"prompt": ["a", "b"]})", "prompt"},
      {R"({"prompt": [[1], [2]]})", "prompt"},
      {R"({"prompt": [1, "a"]})", "prompt"},
      {R"({"prompt": [-1]})", "prompt"},
      {R"({"prompt": [1.5]})", "prompt"},
      {R"({"prompt": [4294967296]})", "prompt"},
      {R"({"prompt": []})", "prompt"},
      {R"({"prompt": "x", "logprobs": 6})", "logprobs"},
      {R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {R"({"prompt": "x", "echo": true})", "echo"},
      {R"({"prompt": "x", "best_of": 2})", "best_of"},
      {R"({"prompt": "x", "suffix": "y"})", "suffix"},
      {R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {R"({"prompt": "x", "n": 3})", "n"},
      {R"({"prompt": "x", "temperature": 5})", "temperature"},
      {R"({"prompt": "x", "stop": ["1", "2", "3", "4", "5"]})", "stop"},
  };
  for (const BadCase& c : cases) {
    const json body = json::parse(c.body);
    const ProtocolError e = error_of([&] { parse_completion_request(body); });
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.what();
  }
}

TEST(OpenAIParse, BodyMustBeAJsonObject) {
  for (const char* body : {"", "{", "{\"messages\": [}", "[1, 2]", "\"text\"", "42", "null"}) {
    const ProtocolError e = error_of([&] { parse_json_body(body); });
    EXPECT_EQ(e.status, 400) << body;
  }
  EXPECT_EQ(parse_json_body(R"({"a": 1})"), json({{"a", 1}}));
}

// A body nested a million levels deep (1 MB, the default body limit) overflowed the HTTP thread's
// stack when the logit_bias refusal printed it; nesting is now bounded when the body is parsed.
TEST(OpenAIParse, DeeplyNestedBodyIs400) {
  const size_t n = 500000;
  const std::string deep = "{\"logit_bias\": " + std::string(n, '[') + std::string(n, ']') + ", \"messages\": []}";
  const ProtocolError e = error_of([&] { parse_json_body(deep); });
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(std::string(e.what()).find("nested deeper than 128 levels"), std::string::npos) << e.what();
  // 128 levels are fine (the refusal is then the field's own).
  const std::string ok = "{\"logit_bias\": " + std::string(127, '[') + std::string(127, ']') + "}";
  const ProtocolError bias = error_of([&] { parse_chat_request(parse_json_body(ok)); });
  EXPECT_EQ(bias.param, "logit_bias") << bias.what();
}

TEST(OpenAIParse, PromptIdsMustBeInTheVocabulary) {
  const std::vector<int32_t> ok = {0, 5, 99};
  EXPECT_NO_THROW(check_prompt_ids(ok, 100));
  const std::vector<int32_t> bad = {0, 100};
  const ProtocolError e = error_of([&] { check_prompt_ids(bad, 100); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "prompt");
  EXPECT_NE(std::string(e.what()).find("100"), std::string::npos);
}

TEST(OpenAIParse, MaxTokensDefaultsAndTheContextCheck) {
  CompletionRequest chat = parse_chat_request(chat_body());
  EXPECT_EQ(resolve_max_tokens(chat, 30, 100), 70);  // the rest of the context
  CompletionRequest cmpl = parse_completion_request(completion_body());
  EXPECT_EQ(resolve_max_tokens(cmpl, 30, 100), 16);  // OpenAI's default
  EXPECT_EQ(resolve_max_tokens(cmpl, 90, 100), 10);  // ... when it fits
  chat.max_tokens = 70;
  EXPECT_EQ(resolve_max_tokens(chat, 30, 100), 70);  // exactly full
  chat.max_tokens = 71;
  ProtocolError e = error_of([&] { resolve_max_tokens(chat, 30, 100); });
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_EQ(e.code, "context_length_exceeded");
  const std::string msg = e.what();
  for (const char* n : {"100", "30", "71"}) EXPECT_NE(msg.find(n), std::string::npos) << msg;
  chat.max_tokens.reset();
  e = error_of([&] { resolve_max_tokens(chat, 100, 100); });  // the prompt fills the context
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(std::string(e.what()).find("100"), std::string::npos);
  chat.max_tokens = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(error_of([&] { resolve_max_tokens(chat, 1, 100); }).status, 400);
}

TEST(OpenAIErrors, RenderAsOpenAIErrorObjects) {
  EXPECT_EQ(ProtocolError(400, "bad", "temperature").to_json(),
            json::parse(R"({"error": {"message": "bad", "type": "invalid_request_error",
                                "param": "temperature", "code": null}})"));
  EXPECT_EQ(ProtocolError(404, "no such model", "model", "model_not_found").to_json(),
            json::parse(R"({"error": {"message": "no such model", "type": "invalid_request_error",
                                "param": "model", "code": "model_not_found"}})"));
  EXPECT_EQ(ProtocolError(401, "key").to_json()["error"]["type"], "authentication_error");
  EXPECT_EQ(ProtocolError(429, "busy").to_json()["error"]["type"], "rate_limit_error");
  EXPECT_EQ(ProtocolError(503, "down").to_json()["error"]["type"], "server_error");
  EXPECT_EQ(ProtocolError(413, "big").to_json()["error"]["type"], "invalid_request_error");
  EXPECT_EQ(ProtocolError(503, "down").to_json()["error"]["param"], nullptr);
}

// Token bytes for the shape tests: ids 1.. spell "Hel", "lo", the two halves of "é", " w".
std::string fake_bytes(int32_t id) {
  static const std::map<int32_t, std::string> v = {
      {1, "Hel"}, {2, "lo"}, {3, "\xc3"}, {4, "\xa9"}, {5, " w"}};
  return v.at(id);
}

ResponseMeta meta(bool include_usage = false) {
  return {"chatcmpl-abc", 1700000000, "smol", include_usage};
}

TEST(OpenAIResponses, ChatCompletionShape) {
  const json got = chat_completion_json(meta(), "Hello", nullptr, "stop", Usage{12, 3, 8});
  const json want = json::parse(R"({
    "id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000, "model": "smol",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello", "refusal": null},
                 "logprobs": null, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
              "prompt_tokens_details": {"cached_tokens": 8}}})");
  EXPECT_EQ(got, want);
}

TEST(OpenAIResponses, TextCompletionShape) {
  const json got = text_completion_json({"cmpl-1", 5, "smol", false}, " there", nullptr, "length",
                                        Usage{4, 16, 0});
  const json want = json::parse(R"({
    "id": "cmpl-1", "object": "text_completion", "created": 5, "model": "smol",
    "choices": [{"index": 0, "text": " there", "logprobs": null, "finish_reason": "length"}],
    "usage": {"prompt_tokens": 4, "completion_tokens": 16, "total_tokens": 20,
              "prompt_tokens_details": {"cached_tokens": 0}}})");
  EXPECT_EQ(got, want);
}

TEST(OpenAIResponses, ChatLogprobs) {
  const std::vector<TokenLogprob> lps = {{1, -0.5f, {{1, -0.5f}, {2, -1.25f}}},
                                         {3, -std::numeric_limits<float>::infinity(), {}}};
  const json got = chat_logprobs_json(lps, fake_bytes);
  json want = json::parse(R"({"content": [
    {"token": "Hel", "logprob": -0.5, "bytes": [72, 101, 108],
     "top_logprobs": [{"token": "Hel", "logprob": -0.5, "bytes": [72, 101, 108]},
                      {"token": "lo", "logprob": -1.25, "bytes": [108, 111]}]},
    {"token": "", "logprob": -9999.0, "bytes": [195], "top_logprobs": []}]})");
  want["content"][1]["token"] = "\xc3";  // raw half character; dump_json shows it as U+FFFD
  EXPECT_EQ(got, want);
}

TEST(OpenAIResponses, CompletionLogprobsAndCodePointOffsets) {
  // "Hel" "lo" then é split over two tokens, then " w": offsets in code points 0, 3, 5, 6, 6.
  const std::vector<TokenLogprob> first = {
      {1, -0.1f, {{1, -0.1f}}}, {2, -0.2f, {{2, -0.2f}, {5, -3.0f}}}, {3, -0.3f, {}}};
  const std::vector<TokenLogprob> second = {{4, -0.4f, {}}, {5, -0.5f, {}}};
  int64_t offset = 0;
  const json a = completion_logprobs_json(first, fake_bytes, offset);
  EXPECT_EQ(offset, 6);
  const json b = completion_logprobs_json(second, fake_bytes, offset);
  EXPECT_EQ(offset, 8);
  EXPECT_EQ(a["tokens"], json({"Hel", "lo", "\xc3"}));
  EXPECT_EQ(a["text_offset"], json({0, 3, 5}));
  EXPECT_EQ(b["text_offset"], json({6, 6}));
  EXPECT_NEAR(a["token_logprobs"][1].get<double>(), -0.2, 1e-6);
  ASSERT_EQ(a["top_logprobs"].size(), 3u);
  EXPECT_NEAR(a["top_logprobs"][1]["lo"].get<double>(), -0.2, 1e-6);
  EXPECT_NEAR(a["top_logprobs"][1][" w"].get<double>(), -3.0, 1e-6);
  EXPECT_EQ(a["top_logprobs"][2], json::object());
}

TEST(OpenAIResponses, ChatStreamChunks) {
  const json role = chat_role_chunk_json(meta());
  EXPECT_EQ(role,
            json::parse(
                R"({"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000,
    "model": "smol", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
    "logprobs": null, "finish_reason": null}]})"));
  EXPECT_EQ(chat_chunk_json(meta(), "Hi", nullptr, "")["choices"],
            json::parse(R"([{"index": 0, "delta": {"content": "Hi"}, "logprobs": null,
                        "finish_reason": null}])"));
  // The closing chunk: empty delta and the reason; or the last text with the reason.
  EXPECT_EQ(
      chat_chunk_json(meta(), "", nullptr, "length")["choices"],
      json::parse(R"([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "length"}])"));
  EXPECT_EQ(chat_chunk_json(meta(), "!", nullptr, "stop")["choices"][0]["delta"],
            json({{"content", "!"}}));
  EXPECT_FALSE(chat_chunk_json(meta(), "Hi", nullptr, "").contains("usage"));
  // include_usage: every chunk has "usage": null, the last has the counts and no choices.
  EXPECT_EQ(chat_chunk_json(meta(true), "Hi", nullptr, "")["usage"], nullptr);
  EXPECT_EQ(chat_role_chunk_json(meta(true))["usage"], nullptr);
  EXPECT_EQ(usage_chunk_json(meta(true), ApiKind::kChat, Usage{5, 2, 0}),
            json::parse(
                R"({"id": "chatcmpl-abc", "object": "chat.completion.chunk", "created": 1700000000,
              "model": "smol", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
              "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 0}}})"));
}

TEST(OpenAIResponses, CompletionStreamChunks) {
  const ResponseMeta m{"cmpl-9", 7, "smol", false};
  EXPECT_EQ(
      completion_chunk_json(m, "abc", nullptr, ""),
      json::parse(R"({"id": "cmpl-9", "object": "text_completion", "created": 7, "model": "smol",
              "choices": [{"index": 0, "text": "abc", "logprobs": null,
                           "finish_reason": null}]})"));
  EXPECT_EQ(completion_chunk_json(m, "", nullptr, "stop")["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(usage_chunk_json(m, ApiKind::kCompletion, Usage{1, 1, 1})["object"], "text_completion");
}

TEST(OpenAIResponses, ModelsList) {
  EXPECT_EQ(models_json("smol", 100, 4096),
            json::parse(R"({"object": "list", "data": [{"id": "smol",
    "object": "model", "created": 100, "owned_by": "tensorpar", "root": "smol", "parent": null,
    "max_model_len": 4096}]})"));
}

TEST(OpenAIResponses, EventsAndInvalidUtf8) {
  EXPECT_EQ(sse_event(json({{"a", 1}})), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Half a character (a token boundary inside "é") must not make the reply fail.
  EXPECT_EQ(dump_json(json("a\xc3")), "\"a\xef\xbf\xbd\"");
  EXPECT_EQ(dump_json(json("é")), "\"é\"");
}

}  // namespace
}  // namespace tensorpar

// The OpenAI API as JSON, without HTTP: parsing and validating the bodies of
// POST /v1/chat/completions and /v1/completions into a prompt + GenerationParams, and building
// the response, streaming-chunk, usage, model-list and error objects the server sends back.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "serve/request.h"
#include "tokenizer/chat_template.h"

namespace tensorpar {

// A request the server refuses, rendered as OpenAI's {"error": {message, type, param, code}}.
// `type` follows from the status: 400/404/413 invalid_request_error, 401 authentication_error,
// 429 rate_limit_error, 5xx server_error. Empty param or code render as null.
struct ProtocolError : std::runtime_error {
  ProtocolError(int status, const std::string& message, std::string param = {},
                std::string code = {});
  int status;
  std::string param;
  std::string type;
  std::string code;
  nlohmann::json to_json() const;
};

// The error type OpenAI uses for an HTTP status.
std::string error_type_for_status(int status);

enum class ApiKind { kChat, kCompletion };

// A parsed, validated request. GenerationParams is complete except max_tokens (which needs the
// prompt's length: resolve_max_tokens) and the seed when none was given (seed_given false: the
// server draws one, so unseeded requests differ). Defaults are OpenAI's: temperature 1, top_p 1;
// top_k 0 and min_p 0 (off) for the extensions.
struct CompletionRequest {
  ApiKind kind = ApiKind::kChat;
  std::string model;                  // "" when absent (then the served model)
  std::vector<ChatMessage> messages;  // chat; "developer" arrives as "system"
  std::string prompt;                 // completions with a text prompt
  std::vector<int32_t> prompt_ids;    // completions with a token-id prompt
  bool prompt_is_ids = false;
  std::optional<int64_t> max_tokens;  // chat: max_completion_tokens, else max_tokens
  GenerationParams params;
  bool seed_given = false;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
};

// The request body as a JSON object; ProtocolError 400 when it is not valid JSON or not an
// object.
nlohmann::json parse_json_body(std::string_view body);
// Field checks of the two endpoints; ProtocolError 400 naming the field for a missing required
// field, a wrong type, a value out of range, or a feature we do not serve (n > 1, echo, tools,
// logit_bias, best_of > 1). Unknown fields are ignored, as vLLM does.
CompletionRequest parse_chat_request(const nlohmann::json& body);
CompletionRequest parse_completion_request(const nlohmann::json& body);

// ProtocolError 400 unless every id is in [0, vocab_size).
void check_prompt_ids(std::span<const int32_t> ids, int64_t vocab_size);

// The completion budget: the request's, else what the context has left (chat, as vLLM) or
// min(16, what is left) (completions, OpenAI's default). ProtocolError 400 naming both numbers
// when prompt + max_tokens exceeds context_length, or the prompt alone fills it.
int64_t resolve_max_tokens(const CompletionRequest& req, int64_t prompt_tokens,
                           int64_t context_length);

// What every response object of one request shares.
struct ResponseMeta {
  std::string id;       // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;  // unix seconds
  std::string model;
  bool include_usage = false;  // streaming: every chunk carries "usage" (null but the last)
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens served from the prefix cache
};

// The raw bytes of a token (Tokenizer::token_bytes), for logprobs.
using TokenBytesFn = std::function<std::string(int32_t)>;

nlohmann::json usage_json(const Usage& usage);
// Chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}]}.
nlohmann::json chat_logprobs_json(std::span<const TokenLogprob> lps, const TokenBytesFn& bytes);
// Completions: {tokens, token_logprobs, top_logprobs: [{token: logprob}], text_offset}.
// text_offset counts code points into the completion text; `offset` is where these tokens begin
// and moves past them (a stream continues it chunk after chunk).
nlohmann::json completion_logprobs_json(std::span<const TokenLogprob> lps,
                                        const TokenBytesFn& bytes, int64_t& offset);

// Whole responses. logprobs: null or the object from the functions above.
nlohmann::json chat_completion_json(const ResponseMeta& meta, const std::string& text,
                                    const nlohmann::json& logprobs,
                                    const std::string& finish_reason, const Usage& usage);
nlohmann::json text_completion_json(const ResponseMeta& meta, const std::string& text,
                                    const nlohmann::json& logprobs,
                                    const std::string& finish_reason, const Usage& usage);

// Streaming chunks. A chat stream opens with the role delta, then content deltas; the chunk
// with a finish_reason ("" = not yet: null) ends the choice; with include_usage one more chunk
// with empty choices carries the usage.
nlohmann::json chat_role_chunk_json(const ResponseMeta& meta);
nlohmann::json chat_chunk_json(const ResponseMeta& meta, const std::string& text,
                               const nlohmann::json& logprobs, const std::string& finish_reason);
nlohmann::json completion_chunk_json(const ResponseMeta& meta, const std::string& text,
                                     const nlohmann::json& logprobs,
                                     const std::string& finish_reason);
nlohmann::json usage_chunk_json(const ResponseMeta& meta, ApiKind kind, const Usage& usage);

// GET /v1/models with the one served model.
nlohmann::json models_json(const std::string& model, int64_t created, int64_t max_model_len);

// JSON text with invalid UTF-8 (a token that is part of a character) replaced by U+FFFD
// rather than throwing.
std::string dump_json(const nlohmann::json& j);
// One server-sent event: "data: <json>\n\n".
std::string sse_event(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace tensorpar

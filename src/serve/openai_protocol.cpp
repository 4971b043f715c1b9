// OpenAI request validation and response objects. Every refusal names the field and says what
// came and what was expected ("temperature: got 3, expected a number in [0, 2]"); a JSON null
// counts as absent, as the OpenAI SDKs send null for unset fields.
#include "serve/openai_protocol.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/json_depth.h"

namespace tensorpar {

using nlohmann::json;

ProtocolError::ProtocolError(int status_, const std::string& message, std::string param_,
                             std::string code_)
    : std::runtime_error(message),
      status(status_),
      param(std::move(param_)),
      type(error_type_for_status(status_)),
      code(std::move(code_)) {}

json ProtocolError::to_json() const {
  return {{"error",
           {{"message", what()},
            {"type", type},
            {"param", param.empty() ? json(nullptr) : json(param)},
            {"code", code.empty() ? json(nullptr) : json(code)}}}};
}

std::string error_type_for_status(int status) {
  if (status == 401) return "authentication_error";
  if (status == 429) return "rate_limit_error";
  if (status >= 500) return "server_error";
  return "invalid_request_error";
}

namespace {

// A value for an error message: its JSON text, shortened so a huge field cannot flood the reply.
std::string shown(const json& v) {
  std::string s = dump_json(v);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

std::string type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "an integer";
    case json::value_t::number_float:
      return "a number";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "null";
  }
}

[[noreturn]] void bad(const std::string& param, const std::string& got,
                      const std::string& expected) {
  throw ProtocolError(400, param + ": got " + got + ", expected " + expected, param);
}

// The field, or null when absent or JSON null.
const json* field(const json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<bool> get_bool(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(name, type_name(*v), "a boolean");
  return v->get<bool>();
}

std::optional<std::string> get_string(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) bad(name, type_name(*v), "a string");
  return v->get<std::string>();
}

// An integer in [lo, hi]. Unsigned values above INT64_MAX are out of every range we accept.
std::optional<int64_t> get_int(const json& body, const char* name, int64_t lo, int64_t hi,
                               const std::string& expected) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer()) bad(name, type_name(*v), expected);
  if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(name, shown(*v), expected);
  const int64_t x = v->get<int64_t>();
  if (x < lo || x > hi) bad(name, shown(*v), expected);
  return x;
}

// A number (integer or float) in the range; open ends exclude the bound.
std::optional<double> get_number(const json& body, const char* name, double lo, double hi,
                                 bool lo_open, bool hi_open) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  const auto text = [](double b) {  // the bounds we use are integers: "2", not "2.0"
    return std::to_string(int64_t(b));
  };
  const std::string expected = std::string("a number in ") + (lo_open ? "(" : "[") + text(lo) +
                               ", " + text(hi) + (hi_open ? ")" : "]");
  if (!v->is_number()) bad(name, type_name(*v), expected);
  const double x = v->get<double>();
  if (!(lo_open ? x > lo : x >= lo) || !(hi_open ? x < hi : x <= hi))
    bad(name, shown(*v), expected);
  return x;
}

// Fields whose non-default values ask for features we do not serve: refuse rather than ignore.
void refuse_unsupported(const json& body, ApiKind kind) {
  get_int(body, "n", 1, 1, "1 (one choice per request)");
  if (const json* v = field(body, "logit_bias"); v && !(v->is_object() && v->empty()))
    bad("logit_bias", shown(*v), "null or {} (logit_bias is not supported)");
  if (kind == ApiKind::kCompletion) {
    if (const auto echo = get_bool(body, "echo"); echo && *echo)
      bad("echo", "true", "false (echo is not supported)");
    get_int(body, "best_of", 1, 1, "1 (best_of is not supported)");
    if (const auto suffix = get_string(body, "suffix"); suffix && !suffix->empty())
      bad("suffix", shown(json(*suffix)), "null (suffix is not supported)");
  } else {
    for (const char* name : {"tools", "functions"})
      if (const json* v = field(body, name); v && !(v->is_array() && v->empty()))
        bad(name, type_name(*v), std::string("null or [] (") + name + " are not supported)");
    if (const json* v = field(body, "response_format")) {
      const bool text = v->is_object() && v->value("type", json()) == "text";
      if (!text)
        bad("response_format", shown(*v), "{\"type\": \"text\"} (JSON mode is not supported)");
    }
  }
}

// The fields both endpoints share, into req.params (and stream flags).
void parse_common(const json& body, CompletionRequest& req) {
  if (const auto model = get_string(body, "model")) req.model = *model;
  SamplingParams& s = req.params.sampling;
  s.temperature = 1.0f;  // OpenAI's default (GenerationParams' own default is greedy)
  if (const auto t = get_number(body, "temperature", 0, 2, false, false)) s.temperature = float(*t);
  if (const auto p = get_number(body, "top_p", 0, 1, true, false)) s.top_p = float(*p);
  if (const auto k = get_int(body, "top_k", -1, std::numeric_limits<int32_t>::max(),
                             "-1 or 0 (off) or an integer >= 1"))
    s.top_k = *k <= 0 ? 0 : int(*k);
  if (const auto m = get_number(body, "min_p", 0, 1, false, true)) s.min_p = float(*m);
  if (const json* v = field(body, "seed")) {
    if (!v->is_number_integer()) bad("seed", type_name(*v), "an integer");
    // Negative seeds are valid in OpenAI's API; their two's complement is as good a seed.
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
    req.seed_given = true;
  }
  if (const auto f = get_number(body, "frequency_penalty", -2, 2, false, false))
    s.frequency_penalty = float(*f);
  if (const auto p = get_number(body, "presence_penalty", -2, 2, false, false))
    s.presence_penalty = float(*p);
  // vLLM's extension (Hugging Face's definition): over the prompt and the generated tokens.
  if (const auto r = get_number(body, "repetition_penalty", 0, 10, true, false))
    s.repetition_penalty = float(*r);
  if (const json* v = field(body, "stop")) {
    std::vector<std::string> stop;
    if (v->is_string()) {
      stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > 4) bad("stop", std::to_string(v->size()) + " strings", "at most 4");
      for (const json& s1 : *v) {
        if (!s1.is_string()) bad("stop", "an array holding " + type_name(s1), "strings");
        stop.push_back(s1.get<std::string>());
      }
    } else {
      bad("stop", type_name(*v), "a string or an array of up to 4 strings");
    }
    for (const std::string& s1 : stop)
      if (s1.empty()) bad("stop", "an empty string", "non-empty stop strings");
    req.params.stop = std::move(stop);
  }
  if (const auto ignore = get_bool(body, "ignore_eos")) req.params.ignore_eos = *ignore;
  if (const auto stream = get_bool(body, "stream")) req.stream = *stream;
  if (const json* v = field(body, "stream_options")) {
    if (!req.stream) bad("stream_options", shown(*v), "null unless stream is true");
    if (!v->is_object()) bad("stream_options", type_name(*v), "an object");
    if (const json* u = field(*v, "include_usage")) {
      if (!u->is_boolean()) bad("stream_options.include_usage", type_name(*u), "a boolean");
      req.include_usage = u->get<bool>();
    }
  }
  if (const json* v = field(body, "user"); v && !v->is_string())
    bad("user", type_name(*v), "a string");
}

// One message's content: a string, or an array of {"type": "text", "text": ...} parts joined.
std::string message_content(const json& msg, size_t i, const std::string& role) {
  const std::string where = "messages[" + std::to_string(i) + "].content";
  const json* c = field(msg, "content");
  if (!c) {
    // An assistant turn that only called tools has no content; we serve no tools, so "" it is.
    if (role == "assistant") return "";
    bad(where, "null", "a string or an array of text parts");
  }
  if (c->is_string()) return c->get<std::string>();
  if (!c->is_array()) bad(where, type_name(*c), "a string or an array of text parts");
  std::string text;
  for (size_t k = 0; k < c->size(); ++k) {
    const json& part = (*c)[k];
    const std::string pw = where + "[" + std::to_string(k) + "]";
    if (!part.is_object())
      bad(pw, type_name(part), "an object {\"type\": \"text\", \"text\": ...}");
    const json* type = field(part, "type");
    if (!type || !type->is_string())
      bad(pw + ".type", type ? type_name(*type) : "nothing", "\"text\"");
    if (type->get<std::string>() != "text")
      bad(pw + ".type", shown(*type), "\"text\" (only text content is supported)");
    const json* t = field(part, "text");
    if (!t || !t->is_string()) bad(pw + ".text", t ? type_name(*t) : "nothing", "a string");
    text += t->get<std::string>();
  }
  return text;
}

// Counts UTF-8 lead bytes: summed over a text's tokens this is the text's length in code points
// even when a character is split between tokens.
int64_t code_points(const std::string& bytes) {
  int64_t n = 0;
  for (unsigned char c : bytes) n += (c & 0xC0) != 0x80;
  return n;
}

// JSON has no infinities; vLLM reports an impossible token's logprob as -9999.
double finite_logprob(float lp) {
  return std::isfinite(lp) ? double(lp) : -9999.0;
}

json bytes_array(const std::string& s) {
  json a = json::array();
  for (unsigned char c : s) a.push_back(int(c));
  return a;
}

json nullable(const std::string& s) {
  return s.empty() ? json(nullptr) : json(s);
}

json stream_base(const ResponseMeta& meta, const char* object) {
  json j = {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
  if (meta.include_usage) j["usage"] = nullptr;
  return j;
}

}  // namespace

json parse_json_body(std::string_view body) {
  // Bounded nesting: a 1 MB body of '[' parses, and printing it for an error message recursed
  // once per level and overflowed the HTTP thread's stack.
  json j;
  try {
    j = json::parse(body, json_depth_limit("body"), /*allow_exceptions=*/false);
  } catch (const Error&) {
    throw ProtocolError(400, "body: got JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
                                 " levels, expected a request object");
  }
  if (j.is_discarded())
    throw ProtocolError(400, "body: got malformed JSON, expected a JSON object");
  if (!j.is_object())
    throw ProtocolError(400, "body: got " + type_name(j) + ", expected a JSON object");
  return j;
}

CompletionRequest parse_chat_request(const json& body) {
  CompletionRequest req;
  req.kind = ApiKind::kChat;
  refuse_unsupported(body, ApiKind::kChat);
  parse_common(body, req);

  const json* msgs = field(body, "messages");
  if (!msgs)
    throw ProtocolError(400, "messages: got nothing, expected an array of messages", "messages");
  if (!msgs->is_array()) bad("messages", type_name(*msgs), "an array of messages");
  if (msgs->empty()) bad("messages", "an empty array", "at least one message");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where, type_name(m), "an object {\"role\", \"content\"}");
    const json* role = field(m, "role");
    if (!role) bad(where + ".role", "nothing", "\"system\", \"user\" or \"assistant\"");
    if (!role->is_string()) bad(where + ".role", type_name(*role), "a string");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";  // OpenAI's newer name for the system role
    if (r != "system" && r != "user" && r != "assistant")
      bad(where + ".role", shown(*role), "\"system\", \"user\" or \"assistant\"");
    req.messages.push_back({r, message_content(m, i, r)});
  }

  // max_completion_tokens replaces the deprecated max_tokens; given both, it wins (as vLLM).
  const std::string range = "an integer >= 1";
  const auto mct =
      get_int(body, "max_completion_tokens", 1, std::numeric_limits<int64_t>::max(), range);
  const auto mt = get_int(body, "max_tokens", 1, std::numeric_limits<int64_t>::max(), range);
  req.max_tokens = mct ? mct : mt;

  const auto logprobs = get_bool(body, "logprobs");
  const auto top = get_int(body, "top_logprobs", 0, 20, "an integer in [0, 20]");
  if (top && !(logprobs && *logprobs))
    bad("top_logprobs", std::to_string(*top), "null unless logprobs is true");
  req.params.top_logprobs = (logprobs && *logprobs) ? int(top.value_or(0)) : -1;
  return req;
}

CompletionRequest parse_completion_request(const json& body) {
  CompletionRequest req;
  req.kind = ApiKind::kCompletion;
  refuse_unsupported(body, ApiKind::kCompletion);
  parse_common(body, req);

  const json* p = field(body, "prompt");
  if (!p)
    throw ProtocolError(400, "prompt: got nothing, expected a string or an array of token ids",
                        "prompt");
  // OpenAI's batch forms ([str], [[ids]]) are accepted with one element: we serve one choice.
  if (p->is_array() && !p->empty() && ((*p)[0].is_string() || (*p)[0].is_array())) {
    if (p->size() > 1)
      bad("prompt", std::to_string(p->size()) + " prompts",
          "one prompt (batches are not supported)");
    p = &(*p)[0];
  }
  if (p->is_string()) {
    req.prompt = p->get<std::string>();
  } else if (p->is_array()) {
    if (p->empty()) bad("prompt", "an empty array", "a string or a non-empty array of token ids");
    for (const json& id : *p) {
      if (!id.is_number_integer())
        bad("prompt", "an array holding " + type_name(id), "token ids (integers)");
      if (id.is_number_unsigned()
              ? id.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max())
              : (id.get<int64_t>() < 0 || id.get<int64_t>() > std::numeric_limits<int32_t>::max()))
        bad("prompt", "token id " + shown(id), "token ids >= 0");
      req.prompt_ids.push_back(int32_t(id.get<int64_t>()));
    }
    req.prompt_is_ids = true;
  } else {
    bad("prompt", type_name(*p), "a string or an array of token ids");
  }

  req.max_tokens =
      get_int(body, "max_tokens", 1, std::numeric_limits<int64_t>::max(), "an integer >= 1");
  if (const auto lp = get_int(body, "logprobs", 0, 5, "an integer in [0, 5]"))
    req.params.top_logprobs = int(*lp);
  return req;
}

void check_prompt_ids(std::span<const int32_t> ids, int64_t vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= vocab_size)
      bad("prompt", "token id " + std::to_string(ids[i]) + " at position " + std::to_string(i),
          "ids in [0, " + std::to_string(vocab_size) + ")");
}

int64_t resolve_max_tokens(const CompletionRequest& req, int64_t prompt_tokens,
                           int64_t context_length) {
  const int64_t left = context_length - prompt_tokens;
  if (!req.max_tokens) {
    if (left < 1)
      throw ProtocolError(
          400,
          "This model's maximum context length is " + std::to_string(context_length) +
              " tokens. However, your prompt has " + std::to_string(prompt_tokens) +
              " tokens, leaving none to generate. Please shorten the prompt.",
          req.kind == ApiKind::kChat ? "messages" : "prompt", "context_length_exceeded");
    return req.kind == ApiKind::kChat ? left : std::min<int64_t>(16, left);
  }
  const int64_t m = *req.max_tokens;
  if (m > left)  // m <= INT64_MAX and left < context: no overflow in the message's sum
    throw ProtocolError(400,
                        "This model's maximum context length is " + std::to_string(context_length) +
                            " tokens. However, you requested " + std::to_string(prompt_tokens) +
                            " + " + std::to_string(m) + " tokens (" +
                            std::to_string(prompt_tokens) + " in the prompt, " + std::to_string(m) +
                            " for the completion). Please reduce the prompt or max_tokens.",
                        "max_tokens", "context_length_exceeded");
  return m;
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

json chat_logprobs_json(std::span<const TokenLogprob> lps, const TokenBytesFn& bytes) {
  json content = json::array();
  for (const TokenLogprob& t : lps) {
    const std::string b = bytes(t.token);
    json top = json::array();
    for (const auto& [id, lp] : t.top) {
      const std::string tb = bytes(id);
      top.push_back({{"token", tb}, {"logprob", finite_logprob(lp)}, {"bytes", bytes_array(tb)}});
    }
    content.push_back({{"token", b},
                       {"logprob", finite_logprob(t.logprob)},
                       {"bytes", bytes_array(b)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json completion_logprobs_json(std::span<const TokenLogprob> lps, const TokenBytesFn& bytes,
                              int64_t& offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const TokenLogprob& t : lps) {
    const std::string b = bytes(t.token);
    tokens.push_back(b);
    token_logprobs.push_back(finite_logprob(t.logprob));
    json alts = json::object();
    for (const auto& [id, lp] : t.top) alts[bytes(id)] = finite_logprob(lp);
    top.push_back(alts);
    offsets.push_back(offset);
    offset += code_points(b);
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_logprobs},
          {"top_logprobs", top},
          {"text_offset", offsets}};
}

json chat_completion_json(const ResponseMeta& meta, const std::string& text, const json& logprobs,
                          const std::string& finish_reason, const Usage& usage) {
  return {{"id", meta.id},
          {"object", "chat.completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices",
           {{{"index", 0},
             {"message", {{"role", "assistant"}, {"content", text}, {"refusal", nullptr}}},
             {"logprobs", logprobs},
             {"finish_reason", nullable(finish_reason)}}}},
          {"usage", usage_json(usage)}};
}

json text_completion_json(const ResponseMeta& meta, const std::string& text, const json& logprobs,
                          const std::string& finish_reason, const Usage& usage) {
  return {{"id", meta.id},
          {"object", "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices",
           {{{"index", 0},
             {"text", text},
             {"logprobs", logprobs},
             {"finish_reason", nullable(finish_reason)}}}},
          {"usage", usage_json(usage)}};
}

json chat_role_chunk_json(const ResponseMeta& meta) {
  json j = stream_base(meta, "chat.completion.chunk");
  j["choices"] = {{{"index", 0},
                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                   {"logprobs", nullptr},
                   {"finish_reason", nullptr}}};
  return j;
}

json chat_chunk_json(const ResponseMeta& meta, const std::string& text, const json& logprobs,
                     const std::string& finish_reason) {
  json j = stream_base(meta, "chat.completion.chunk");
  // The closing chunk of a stream has an empty delta unless it also carries the last text.
  json delta = json::object();
  if (!text.empty() || finish_reason.empty()) delta["content"] = text;
  j["choices"] = {{{"index", 0},
                   {"delta", delta},
                   {"logprobs", logprobs},
                   {"finish_reason", nullable(finish_reason)}}};
  return j;
}

json completion_chunk_json(const ResponseMeta& meta, const std::string& text, const json& logprobs,
                           const std::string& finish_reason) {
  json j = stream_base(meta, "text_completion");
  j["choices"] = {{{"index", 0},
                   {"text", text},
                   {"logprobs", logprobs},
                   {"finish_reason", nullable(finish_reason)}}};
  return j;
}

json usage_chunk_json(const ResponseMeta& meta, ApiKind kind, const Usage& usage) {
  json j = stream_base(meta, kind == ApiKind::kChat ? "chat.completion.chunk" : "text_completion");
  j["choices"] = json::array();
  j["usage"] = usage_json(usage);
  return j;
}

json models_json(const std::string& model, int64_t created, int64_t max_model_len) {
  return {{"object", "list"},
          {"data",
           {{{"id", model},
             {"object", "model"},
             {"created", created},
             {"owned_by", "tensorpar"},
             {"root", model},
             {"parent", nullptr},
             {"max_model_len", max_model_len}}}}};
}

std::string dump_json(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string sse_event(const json& j) {
  return "data: " + dump_json(j) + "\n\n";
}

}  // namespace tensorpar

// The HTTP routes of `tensorpar serve` over cpp-httplib: each request is validated
// (openai_protocol), tokenized, submitted to the Engine, and answered from the chunks its handle
// returns, as one JSON object or as server-sent events. A handler waits in ~100 ms slices so it
// notices a client that left (and cancels its request) and a server that is stopping.
#include "serve/http_server.h"

#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>
#include <random>
#include <thread>

#include "core/error.h"
#include "serve/http_listener.h"
#include "serve/openai_protocol.h"
#include "serve/peer_socket.h"
#include "serve/web_page.h"

namespace tensorpar {

using nlohmann::json;

namespace {

constexpr std::chrono::milliseconds kPollInterval{100};

int64_t unix_now() {
  return int64_t(std::time(nullptr));
}

void send_error(httplib::Response& res, const ProtocolError& e) {
  res.status = e.status;
  if (e.status == 429) res.set_header("Retry-After", "1");
  if (e.status == 401) res.set_header("WWW-Authenticate", "Bearer");
  res.set_content(dump_json(e.to_json()), "application/json");
}

const char* state_name(Engine::State s) {
  switch (s) {
    case Engine::State::kStarting:
      return "starting";
    case Engine::State::kRunning:
      return "running";
    case Engine::State::kDraining:
      return "draining";
    case Engine::State::kStopped:
      return "stopped";
    case Engine::State::kFailed:
      return "failed";
  }
  return "unknown";
}

// Compares in time independent of where the strings differ, so the key cannot be guessed
// byte by byte from response times.
bool same_secret(const std::string& a, const std::string& b) {
  unsigned diff = unsigned(a.size() != b.size());
  for (size_t i = 0; i < a.size(); ++i)
    diff |= unsigned(uint8_t(a[i]) ^ uint8_t(i < b.size() ? b[i] : 0));
  return diff == 0;
}

}  // namespace

struct HttpServer::Impl {
  Impl(const HttpServerConfig& config, Engine& engine, const Tokenizer& tokenizer,
       const ChatTemplate& chat_template)
      : config_(config),
        engine_(engine),
        tokenizer_(tokenizer),
        template_(chat_template),
        created_(unix_now()),
        rng_(std::random_device{}()) {}

  void add_routes();
  bool authorized(const httplib::Request& req) const;
  // Why the server takes no requests now (failed, starting, draining), or nullopt.
  std::optional<ProtocolError> unavailable() const;
  std::vector<int32_t> prompt_ids(const CompletionRequest& r) const;
  uint64_t draw();
  void handle_generate(const httplib::Request& req, httplib::Response& res, ApiKind kind);
  void respond_whole(const httplib::Request& req, httplib::Response& res, ApiKind kind,
                     const std::shared_ptr<RequestHandle>& handle, const ResponseMeta& meta,
                     bool logprobs, int64_t prompt_tokens);
  void respond_stream(const httplib::Request& req, httplib::Response& res, ApiKind kind,
                      const std::shared_ptr<RequestHandle>& handle, const ResponseMeta& meta,
                      bool logprobs, int64_t prompt_tokens);
  bool stop_requested() const { return config_.stop_requested && config_.stop_requested(); }
  // Set by stop() or set_failed(): waiting handlers give up at their next poll.
  bool ending() const { return stopping_.load() || failed_.load(); }
  std::string failed_why() const {
    std::lock_guard lock(mu_);
    return failed_why_;
  }

  HttpServerConfig config_;
  Engine& engine_;
  const Tokenizer& tokenizer_;
  const ChatTemplate& template_;
  const int64_t created_;
  HttpListener http_{"HttpServer"};
  httplib::Server& server_ = http_.server();
  std::atomic<bool> stopping_{false}, failed_{false};
  mutable std::mutex mu_;  // failed_why_, rng_
  std::string failed_why_;
  std::mt19937_64 rng_;
};

bool HttpServer::Impl::authorized(const httplib::Request& req) const {
  if (config_.api_key.empty()) return true;
  const std::string h = req.get_header_value("Authorization");
  const std::string prefix = "Bearer ";
  return h.compare(0, prefix.size(), prefix) == 0 &&
         same_secret(h.substr(prefix.size()), config_.api_key);
}

std::optional<ProtocolError> HttpServer::Impl::unavailable() const {
  if (failed_) return ProtocolError(503, "The engine failed: " + failed_why());
  if (stopping_ || stop_requested()) return ProtocolError(503, "The server is shutting down.");
  if (!engine_.ready())
    return ProtocolError(
        503, std::string("The engine is ") + state_name(engine_.state()) + "; try again later.");
  return std::nullopt;
}

std::vector<int32_t> HttpServer::Impl::prompt_ids(const CompletionRequest& r) const {
  if (r.prompt_is_ids) {
    check_prompt_ids(r.prompt_ids, tokenizer_.vocab_size());
    return r.prompt_ids;
  }
  // As `tensorpar generate --chat` builds its prompt: template text, special tokens parsed, BOS
  // first when the tokenizer asks for one and the template did not write it.
  const std::string text = r.kind == ApiKind::kChat ? template_.apply(r.messages, true) : r.prompt;
  std::vector<int32_t> ids = tokenizer_.encode(text);
  const int32_t bos = tokenizer_.bos_id();
  if (tokenizer_.add_bos() && bos >= 0 && (ids.empty() || ids[0] != bos))
    ids.insert(ids.begin(), bos);
  return ids;
}

uint64_t HttpServer::Impl::draw() {
  std::lock_guard lock(mu_);
  return rng_();
}

void HttpServer::Impl::handle_generate(const httplib::Request& req, httplib::Response& res,
                                       ApiKind kind) {
  try {
    if (!authorized(req))
      throw ProtocolError(401, "Missing or invalid API key (Authorization: Bearer <key>).", "",
                          "invalid_api_key");
    if (auto e = unavailable()) throw *e;
    const json body = parse_json_body(req.body);
    const CompletionRequest r =
        kind == ApiKind::kChat ? parse_chat_request(body) : parse_completion_request(body);
    if (!r.model.empty() && r.model != config_.served_model_name)
      throw ProtocolError(404,
                          "The model `" + r.model + "` does not exist; this server serves `" +
                              config_.served_model_name + "`.",
                          "model", "model_not_found");
    std::vector<int32_t> ids;
    try {
      ids = prompt_ids(r);
    } catch (const Error& e) {  // the chat template refused the conversation, or encode the text
      throw ProtocolError(400, e.what(), kind == ApiKind::kChat ? "messages" : "prompt");
    }
    if (ids.empty())
      throw ProtocolError(400, "prompt: got no tokens, expected at least one", "prompt");
    const int64_t prompt_tokens = int64_t(ids.size());
    GenerationParams params = r.params;
    params.max_tokens = resolve_max_tokens(r, prompt_tokens, engine_.context_length());
    if (!r.seed_given) params.sampling.seed = draw();
    std::shared_ptr<RequestHandle> handle;
    try {
      handle = engine_.submit(std::move(ids), params);
    } catch (const SubmitError& e) {
      throw ProtocolError(e.status, e.what());
    }
    ResponseMeta meta;
    char hex[40];
    std::snprintf(hex, sizeof(hex), "%016llx%016llx", (unsigned long long)draw(),
                  (unsigned long long)draw());
    meta.id = std::string(kind == ApiKind::kChat ? "chatcmpl-" : "cmpl-") + hex;
    meta.created = unix_now();
    meta.model = config_.served_model_name;
    meta.include_usage = r.include_usage;
    const bool logprobs = params.top_logprobs >= 0;
    if (r.stream)
      respond_stream(req, res, kind, handle, meta, logprobs, prompt_tokens);
    else
      respond_whole(req, res, kind, handle, meta, logprobs, prompt_tokens);
  } catch (const ProtocolError& e) {
    send_error(res, e);
  }
}

void HttpServer::Impl::respond_whole(const httplib::Request& req, httplib::Response& res,
                                     ApiKind kind, const std::shared_ptr<RequestHandle>& handle,
                                     const ResponseMeta& meta, bool logprobs,
                                     int64_t prompt_tokens) {
  const int fd = find_connection_socket(req.remote_addr, req.remote_port, req.local_port);
  std::string text;
  std::vector<TokenLogprob> lps;
  StreamChunk last;
  for (;;) {
    std::optional<StreamChunk> c = handle->next(kPollInterval);
    if (!c) {
      if (ending()) {
        handle->cancel();
        throw *unavailable();
      }
      if (peer_closed(fd)) {  // nobody will read the answer: free the batch slot now
        handle->cancel();
        res.status = 499;  // nginx's "client closed request"; never reaches the client
        return;
      }
      continue;
    }
    text += c->text;
    lps.insert(lps.end(), c->logprobs.begin(), c->logprobs.end());
    if (c->finished) {
      last = std::move(*c);
      break;
    }
  }
  if (last.finish_reason == "error") throw ProtocolError(503, "Generation failed: " + last.error);
  const Usage usage{last.prompt_tokens > 0 ? last.prompt_tokens : prompt_tokens,
                    last.completion_tokens, last.cached_prompt_tokens};
  const TokenBytesFn bytes = [this](int32_t id) { return tokenizer_.token_bytes(id); };
  json out;
  if (kind == ApiKind::kChat) {
    out =
        chat_completion_json(meta, text, logprobs ? chat_logprobs_json(lps, bytes) : json(nullptr),
                             last.finish_reason, usage);
  } else {
    int64_t offset = 0;
    out = text_completion_json(
        meta, text, logprobs ? completion_logprobs_json(lps, bytes, offset) : json(nullptr),
        last.finish_reason, usage);
  }
  res.set_content(dump_json(out), "application/json");
}

void HttpServer::Impl::respond_stream(const httplib::Request& req, httplib::Response& res,
                                      ApiKind kind, const std::shared_ptr<RequestHandle>& handle,
                                      const ResponseMeta& meta, bool logprobs,
                                      int64_t prompt_tokens) {
  // The provider runs on this connection's thread after the handler returns; the socket stays
  // open until it is done.
  const int fd = find_connection_socket(req.remote_addr, req.remote_port, req.local_port);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");  // proxies: pass events on as they come
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, kind, handle, meta, logprobs, prompt_tokens, fd](size_t, httplib::DataSink& sink) {
        const auto send = [&](const std::string& s) { return sink.write(s.data(), s.size()); };
        const auto finish = [&](std::string last) {
          last.append(kSseDone);
          send(last);
          sink.done();
          return true;
        };
        const TokenBytesFn bytes = [this](int32_t id) { return tokenizer_.token_bytes(id); };
        int64_t text_offset = 0;
        if (kind == ApiKind::kChat && !send(sse_event(chat_role_chunk_json(meta)))) {
          handle->cancel();
          return false;
        }
        for (;;) {
          std::optional<StreamChunk> c = handle->next(kPollInterval);
          if (!c) {
            if (ending()) {
              handle->cancel();
              return finish(sse_event(unavailable()->to_json()));
            }
            if (peer_closed(fd) || !sink.is_writable()) {
              handle->cancel();
              return false;
            }
            continue;
          }
          const bool error = c->finished && c->finish_reason == "error";
          const std::string reason = c->finished && !error ? c->finish_reason : "";
          // A chunk with nothing to say (text held back for a stop string) sends nothing.
          if (!c->text.empty() || !c->logprobs.empty() || !reason.empty()) {
            json lp = nullptr;
            if (logprobs && !c->logprobs.empty())
              lp = kind == ApiKind::kChat
                       ? chat_logprobs_json(c->logprobs, bytes)
                       : completion_logprobs_json(c->logprobs, bytes, text_offset);
            const json chunk = kind == ApiKind::kChat
                                   ? chat_chunk_json(meta, c->text, lp, reason)
                                   : completion_chunk_json(meta, c->text, lp, reason);
            if (!send(sse_event(chunk))) {
              handle->cancel();
              return false;
            }
          }
          if (!c->finished) continue;
          std::string tail;
          if (error)
            tail += sse_event(ProtocolError(503, "Generation failed: " + c->error).to_json());
          if (meta.include_usage) {
            const Usage usage{c->prompt_tokens > 0 ? c->prompt_tokens : prompt_tokens,
                              c->completion_tokens, c->cached_prompt_tokens};
            tail += sse_event(usage_chunk_json(meta, kind, usage));
          }
          return finish(tail);
        }
      },
      [handle](bool success) {
        if (!success) handle->cancel();  // the connection broke before the stream ended
      });
}

void HttpServer::Impl::add_routes() {
  server_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, ApiKind::kChat);
  });
  server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(req, res, ApiKind::kCompletion);
  });
  server_.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req))
      return send_error(res,
                        ProtocolError(401, "Missing or invalid API key.", "", "invalid_api_key"));
    if (failed_) return send_error(res, *unavailable());
    res.set_content(
        dump_json(models_json(config_.served_model_name, created_, engine_.context_length())),
        "application/json");
  });
  server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool stopping = stopping_ || stop_requested();
    const bool ok = !failed_ && !stopping && engine_.ready();
    res.status = ok ? 200 : 503;
    const char* status = failed_    ? "failed"
                         : stopping ? "stopping"
                         : ok       ? "ok"
                                    : state_name(engine_.state());
    res.set_content(dump_json({{"status", status}}), "application/json");
  });
  server_.Get("/metrics", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req))
      return send_error(res,
                        ProtocolError(401, "Missing or invalid API key.", "", "invalid_api_key"));
    res.set_content(engine_.metrics().render_prometheus(),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  server_.Get("/", [](const httplib::Request&, httplib::Response& res) {
    const std::string_view page = chat_page_html();
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
  // httplib's own refusals (no route, body over the limit, unparsable request) get an OpenAI
  // error body too; handlers that wrote one keep theirs.
  server_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty() || res.is_chunked_content_provider_) return;
    std::string msg;
    if (res.status == 413)
      msg = "body: got more than " + std::to_string(config_.max_body_bytes) +
            " bytes, expected at most " + std::to_string(config_.max_body_bytes);
    else if (res.status == 404)
      msg = "No route " + req.method + " " + req.path;
    else
      msg = "Bad request (" + std::to_string(res.status) + ")";
    res.set_content(dump_json(ProtocolError(res.status, msg).to_json()), "application/json");
  });
  server_.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string msg = "internal error";
        try {
          std::rethrow_exception(std::move(ep));
        } catch (const std::exception& e) {
          msg = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        send_error(res, ProtocolError(500, msg));
      });
}

HttpServer::HttpServer(const HttpServerConfig& config, Engine& engine, const Tokenizer& tokenizer,
                       const ChatTemplate& chat_template)
    : impl_(std::make_unique<Impl>(config, engine, tokenizer, chat_template)) {
  TP_CHECK(config.threads >= 1, "[HttpServer] threads: got ", config.threads, ", expected >= 1");
  TP_CHECK(!config.served_model_name.empty(),
           "[HttpServer] served_model_name is empty, expected a name");
  const int threads = config.threads;
  impl_->server_.new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
  impl_->server_.set_payload_max_length(config.max_body_bytes);
  // Benchmarks reuse connections for many requests; httplib's default closes after 5.
  impl_->server_.set_keep_alive_max_count(10000);
  impl_->add_routes();
}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::start() {
  impl_->http_.start(impl_->config_.host, impl_->config_.port);
}

void HttpServer::stop() {
  impl_->stopping_ = true;  // waiting handlers give up at their next poll
  impl_->http_.stop();
}

int HttpServer::port() const {
  return impl_->http_.port();
}

void HttpServer::set_failed(const std::string& why) {
  {
    std::lock_guard lock(impl_->mu_);
    impl_->failed_why_ = why;
  }
  impl_->failed_ = true;
}

}  // namespace tensorpar

// The OpenAI-compatible HTTP front of `tensorpar serve` (world rank 0 only): routes requests to
// the Engine and streams its chunks back as server-sent events. Routes: POST /v1/chat/completions,
// POST /v1/completions, GET /v1/models, GET /health, GET /metrics, GET / (the chat page).
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "serve/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace tensorpar {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8080;      // 0: any free port (port() says which)
  std::string api_key;  // non-empty: /v1/* and /metrics need "Authorization: Bearer <key>"
  std::string served_model_name;    // the `model` requests must name (or leave out)
  size_t max_body_bytes = 1 << 20;  // larger bodies get 413
  int threads = 128;                // connection threads; a streaming client holds one throughout
  // Optional: true once a stop is on its way that the engine has not seen yet (the CLI: SIGTERM
  // arrived, its handler thread not yet run). The server then already refuses like a draining one.
  std::function<bool()> stop_requested;
};

class HttpServer {
 public:
  // engine, tokenizer and chat_template must outlive the server.
  HttpServer(const HttpServerConfig& config, Engine& engine, const Tokenizer& tokenizer,
             const ChatTemplate& chat_template);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (throws Error naming them when it cannot) and serves from a background thread.
  void start();
  // Ends waiting requests (503 / an error event), stops listening and joins every thread.
  // Idempotent.
  void stop();
  // The bound port, once started.
  int port() const;
  // The engine failed (Engine::run threw): every route but / answers 503 with `why` from now on,
  // and requests in flight end with an error.
  void set_failed(const std::string& why);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tensorpar

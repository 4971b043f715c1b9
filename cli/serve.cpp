// `tensorpar serve`: an OpenAI-compatible HTTP server with continuous batching. Every rank runs
// the Engine; rank 0 also loads the tokenizer and serves HTTP. SIGINT/SIGTERM drain the engine
// (running requests get --grace seconds; a second signal stops at once) and exit 0.
#include <pthread.h>
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <thread>

#include "cli/run_model.h"
#include "core/error.h"
#include "model/tokenizer_loader.h"
#include "serve/engine.h"
#include "serve/http_server.h"

namespace tensorpar::cli {

namespace {

struct ServeCliOptions {
  CommonOptions common;
  ModelOptions model;
  EngineOptions engine;
  HttpServerConfig http;
  double grace_s = 30;
};

// The name clients see in /v1/models when --served-model-name is not given: the model file's
// or directory's name, without ".gguf".
std::string default_model_name(const std::string& path) {
  std::filesystem::path p(path);
  if (!p.has_filename()) p = p.parent_path();  // "dir/" -> "dir"
  std::string name = p.filename().string();
  if (p.extension() == ".gguf") name = p.stem().string();
  return name.empty() ? "model" : name;
}

// Rank 0: takes SIGINT/SIGTERM (blocked in every thread) and stops the engine. Polls with a
// timeout so it also ends when the engine stops on its own. `signalled` turns true before the
// engine hears of the stop.
class SignalWaiter {
 public:
  SignalWaiter(const sigset_t& signals, Engine& engine, double grace_s,
               std::atomic<bool>& signalled)
      : thread_([this, signals, &engine, grace_s, &signalled] {
          int received = 0;
          const timespec poll{0, 200'000'000};
          while (!done_) {
            const int sig = sigtimedwait(&signals, nullptr, &poll);
            if (sig < 0) continue;  // timeout or EINTR
            signalled = true;
            ++received;
            engine.stop(received == 1 ? grace_s : 0);
            std::fprintf(stderr, "%s: %s\n", strsignal(sig),
                         received == 1 ? "draining (again to stop now)" : "stopping now");
          }
        }) {}
  ~SignalWaiter() {
    done_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

// Whether SIGINT or SIGTERM is pending: sent to the process but not yet taken by the waiter.
bool stop_signal_pending() {
  sigset_t pending;
  if (sigpending(&pending) != 0) return false;
  return sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1;
}

void serve_rank0(const ServeCliOptions& o, CausalLM& model, const EngineOptions& eo,
                 const sigset_t& signals) {
  const Tokenizer tok = load_tokenizer(tokenizer_source(o.model));
  const ChatTemplate tmpl = chat_template_or_chatml(o.model, tok, "serve");
  Engine engine(model, &tok, eo);
  HttpServerConfig hc = o.http;
  if (hc.served_model_name.empty()) hc.served_model_name = default_model_name(o.model.model);
  engine.metrics().model_name = hc.served_model_name;
  // A request or /health arriving between the signal and the waiter's engine.stop() (a loaded
  // machine may run the HTTP thread first) already sees a draining server.
  std::atomic<bool> signalled{false};
  hc.stop_requested = [&signalled] { return signalled.load() || stop_signal_pending(); };
  HttpServer server(hc, engine, tok, tmpl);
  server.start();
  const std::string url = "http://" + hc.host + ":" + std::to_string(server.port());
  const int pp = model.control().size() / model.tp().size();
  std::fprintf(stderr, "serving %s on %s (tp %d, pp %d, context %lld)\n", hc.served_model_name.c_str(),
               url.c_str(), model.tp().size(), pp, (long long)engine.context_length());
  if (o.common.json)
    std::cout << nlohmann::json{{"event", "serving"},
                                {"model", hc.served_model_name},
                                {"url", url},
                                {"tp", model.tp().size()},
                                {"pp", pp},
                                {"context_length", engine.context_length()}}
                     .dump()
              << std::endl;
  try {
    SignalWaiter waiter(signals, engine, o.grace_s, signalled);
    engine.run();
  } catch (const std::exception& e) {
    // A rank failed: refuse everything until the server is down, then report and exit non-zero.
    server.set_failed(e.what());
    server.stop();
    throw;
  }
  server.stop();
}

void run_serve(const ServeCliOptions& o) {
  // Block the stop signals before any rank thread exists: threads inherit the mask, so a signal
  // stays pending for rank 0's sigtimedwait instead of killing the process in some thread.
  sigset_t signals, old;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  TP_CHECK(pthread_sigmask(SIG_BLOCK, &signals, &old) == 0, "[serve] cannot block SIGINT/SIGTERM");
  try {
    check_model_paths(o.model, "serve", /*needs_tokenizer=*/true);
    run_with_model("serve", o.common, o.model, [&](CausalLM& model) {
      EngineOptions eo = o.engine;
      eo.ctx = o.model.ctx;
      if (eo.ctx > 0) context_length(o.model, model);  // refuses a --ctx past the model's positions
      if (model.control().rank() == 0) {
        serve_rank0(o, model, eo, signals);
      } else {
        Engine engine(model, nullptr, eo);
        engine.run();
      }
    });
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw;
  }
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeCliOptions>();
  CLI::App* cmd =
      app.add_subcommand("serve", "OpenAI-compatible HTTP server with continuous batching");
  add_model_options(*cmd, o->model);
  add_common_options(*cmd, o->common);
  cmd->add_option("--host", o->http.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->http.port, "Port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  cmd->add_option(
      "--api-key", o->http.api_key,
      "Require 'Authorization: Bearer KEY' on /v1/* and /metrics (/health and / stay open)");
  cmd->add_option("--served-model-name", o->http.served_model_name,
                  "Model name in the API (default: the --model file or directory name)");
  cmd->add_option("--max-seqs", o->engine.max_seqs,
                  "Sequences running at once (decode rows per step)")
      ->check(CLI::Range(int64_t(1), int64_t(4096)))
      ->capture_default_str();
  cmd->add_option("--kv-cache-mb", o->engine.kv_cache_mb,
                  "KV cache per rank in MiB (0: enough for --max-seqs full contexts, capped)")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("--max-batch-tokens", o->engine.max_batch_tokens,
                  "Tokens per step at most (decode rows + prefill chunks)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--max-queue", o->engine.max_queue,
                  "Waiting requests beyond which requests get 429")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 30))
      ->capture_default_str();
  cmd->add_option("--grace", o->grace_s,
                  "Seconds running requests get to finish after SIGINT/SIGTERM")
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace tensorpar::cli

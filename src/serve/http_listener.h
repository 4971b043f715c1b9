// A cpp-httplib server listening on one host:port from a background thread, that keeps listening
// when httplib's accept loop ends on an accept() error, and stops cleanly. The server's routes
// are set by its owner (HttpServer, MetricsEndpoint) before start().
#pragma once

#include <httplib.h>

#include <atomic>
#include <string>
#include <thread>

namespace tensorpar {

class HttpListener {
 public:
  // `who` names the owner in errors and log lines ("HttpServer", "metrics").
  explicit HttpListener(std::string who);
  ~HttpListener();  // stop()
  HttpListener(const HttpListener&) = delete;
  HttpListener& operator=(const HttpListener&) = delete;

  httplib::Server& server() { return server_; }
  // Binds host:port (0: any free port) and serves from a background thread; throws Error naming
  // the address when it cannot bind. Returns once the accept loop runs.
  void start(const std::string& host, int port);
  // Stops listening and joins the handlers and the thread. Idempotent.
  void stop();
  // The bound port, once started (-1 before).
  int port() const { return port_; }

 private:
  std::string who_, host_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
  std::atomic<bool> stopping_{false}, done_{false};
};

}  // namespace tensorpar

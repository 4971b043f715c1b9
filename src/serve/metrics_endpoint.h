// GET /metrics on host:port from a background thread, rendered on each request by a function:
// how a process that is not a server (a training run, `train --metrics-port`) exposes Prometheus
// metrics. Other paths answer 404.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace tensorpar {

class HttpListener;

class MetricsEndpoint {
 public:
  // Binds and starts serving (throws Error naming the address when it cannot). render is called
  // from the endpoint's threads, so it must be thread-safe; it must outlive the endpoint.
  MetricsEndpoint(const std::string& host, int port, std::function<std::string()> render);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;
  int port() const;  // the bound one (useful with port 0)

 private:
  std::unique_ptr<HttpListener> http_;
};

}  // namespace tensorpar

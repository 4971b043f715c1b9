// MetricsEndpoint (see metrics_endpoint.h).
#include "serve/metrics_endpoint.h"

#include "serve/http_listener.h"

namespace tensorpar {

MetricsEndpoint::MetricsEndpoint(const std::string& host, int port, std::function<std::string()> render)
    : http_(std::make_unique<HttpListener>("metrics")) {
  httplib::Server& s = http_->server();
  s.new_task_queue = [] { return new httplib::ThreadPool(2); };  // a scraper or two
  s.Get("/metrics", [render = std::move(render)](const httplib::Request&, httplib::Response& res) {
    res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  http_->start(host, port);
}

MetricsEndpoint::~MetricsEndpoint() = default;

int MetricsEndpoint::port() const {
  return http_->port();
}

}  // namespace tensorpar

// HttpListener (see http_listener.h).
#include "serve/http_listener.h"

#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>

#include "core/error.h"

namespace tensorpar {

HttpListener::HttpListener(std::string who) : who_(std::move(who)) {
  // httplib's default also sets SO_REUSEPORT, with which a second server binds a port already
  // in use and the kernel splits the connections between the two. SO_REUSEADDR alone still
  // allows a restart while old connections linger in TIME_WAIT.
  server_.set_socket_options([](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
}

HttpListener::~HttpListener() {
  stop();
}

void HttpListener::start(const std::string& host, int port) {
  TP_CHECK(!thread_.joinable(), "[", who_, "] already started");
  host_ = host;
  if (port == 0) {
    port_ = server_.bind_to_any_port(host);
    TP_CHECK(port_ > 0, "[", who_, "] cannot bind ", host, " to any port");
  } else {
    TP_CHECK(server_.bind_to_port(host, port), "[", who_, "] cannot bind ", host, ":", port,
             " (address in use, or not an address of this machine)");
    port_ = port;
  }
  thread_ = std::thread([this] {
    for (;;) {
      server_.listen_after_bind();
      if (stopping_) break;
      // httplib 0.11 ends its accept loop on any accept() error (EINTR, ECONNABORTED, ...) and
      // closes the socket: listen again on the same port rather than serve nothing.
      std::fprintf(stderr, "[%s] the listener on %s:%d stopped (%s); listening again\n", who_.c_str(),
                   host_.c_str(), port_, std::strerror(errno));
      while (!stopping_ && !server_.bind_to_port(host_, port_))
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (stopping_) break;
    }
    done_ = true;
  });
  // httplib's stop() does nothing before the loop runs: wait for it, so a stop() right after
  // start() finds it running.
  while (!server_.is_running() && !done_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

void HttpListener::stop() {
  stopping_ = true;
  // Repeated, because the thread may be between two listens (see start()) when we first ask.
  while (thread_.joinable() && !done_) {
    server_.stop();  // closes the listening socket; listen_after_bind joins the handlers
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace tensorpar

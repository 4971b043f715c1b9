// MetricsEndpoint: GET /metrics answers what the render function returns at that moment, other
// paths 404, and a port already taken is an error naming the address.
#include "serve/metrics_endpoint.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <atomic>

#include "core/error.h"

namespace tensorpar {
namespace {

TEST(MetricsEndpoint, ServesTheRenderedTextAndNothingElse) {
  std::atomic<int> calls{0};
  MetricsEndpoint ep("127.0.0.1", 0, [&] { return "tensorpar:x " + std::to_string(++calls) + "\n"; });
  ASSERT_GT(ep.port(), 0);
  httplib::Client client("127.0.0.1", ep.port());
  auto first = client.Get("/metrics");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 200);
  EXPECT_EQ(first->body, "tensorpar:x 1\n");
  EXPECT_NE(first->get_header_value("Content-Type").find("text/plain; version=0.0.4"), std::string::npos);
  auto second = client.Get("/metrics");
  ASSERT_TRUE(second);
  EXPECT_EQ(second->body, "tensorpar:x 2\n");  // rendered per request
  auto other = client.Get("/v1/models");
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 404);

  try {
    MetricsEndpoint taken("127.0.0.1", ep.port(), [] { return std::string(); });
    FAIL() << "a second endpoint bound the same port";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(ep.port())), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tensorpar

#include <httplib.h>

#include <catch2/catch.hpp>
#include <stdexcept>

#include "epd/http/metrics_endpoint.hpp"

using epd::http::MetricsEndpoint;

TEST_CASE("GET /metrics serves the rendered text with Prometheus's content type", "[metrics]") {
  int renders = 0;
  MetricsEndpoint ep([&] { return "epd_up " + std::to_string(++renders) + "\n"; });
  auto port = ep.start("127.0.0.1", 0);
  REQUIRE(port.ok());
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/metrics");
  REQUIRE(r);
  CHECK(r->status == 200);
  CHECK(r->body == "epd_up 1\n");
  CHECK(r->get_header_value("Content-Type") == "text/plain; version=0.0.4; charset=utf-8");
  CHECK(c.Get("/metrics")->body == "epd_up 2\n");  // rendered per scrape
  auto other = c.Get("/v1/models");
  REQUIRE(other);
  CHECK(other->status == 404);
  auto post = c.Post("/metrics", "x", "text/plain");
  REQUIRE(post);
  CHECK(post->status == 405);
  CHECK(post->get_header_value("Allow") == "GET, HEAD");
  ep.stop();
  CHECK_FALSE(httplib::Client("127.0.0.1", *port).Get("/metrics"));
}

TEST_CASE("a render that throws answers 500 and the endpoint keeps serving", "[metrics]") {
  bool fail = true;
  MetricsEndpoint ep([&]() -> std::string {
    if (fail) throw std::runtime_error("collector broke");
    return "ok\n";
  });
  auto port = ep.start("127.0.0.1", 0);
  REQUIRE(port.ok());
  httplib::Client c("127.0.0.1", *port);
  auto r = c.Get("/metrics");
  REQUIRE(r);
  CHECK(r->status == 500);
  CHECK(r->body.find("collector broke") != std::string::npos);
  fail = false;
  CHECK(c.Get("/metrics")->status == 200);
}

TEST_CASE("an address already taken is an error naming it", "[metrics]") {
  MetricsEndpoint a([] { return std::string(); });
  auto port = a.start("127.0.0.1", 0);
  REQUIRE(port.ok());
  MetricsEndpoint b([] { return std::string(); });
  auto again = b.start("127.0.0.1", *port);
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().detail.find(std::to_string(*port)) != std::string::npos);
}

#pragma once
// An HttpApi on 127.0.0.1 (port picked by the kernel) over a FakeRouterService, with small limits so the
// size checks are cheap to hit.
#include <httplib.h>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "epd/http/http_api.hpp"
#include "fake_router_service.hpp"

namespace epd::http::test {

inline HttpApiConfig small_config() {
  HttpApiConfig c;
  c.server.max_body_bytes = 64 * 1024;
  c.generate.max_prompt_bytes = 1024;
  c.generate.max_image_bytes = 4096;
  c.generate.max_tokens_limit = 64;
  c.server.request_timeout = std::chrono::milliseconds(500);  // stalled clients give up quickly
  c.server.idle_timeout = std::chrono::seconds(1);
  return c;
}

struct TestServer {
  FakeRouterService service;
  HttpApi api;
  uint16_t port = 0;

  explicit TestServer(HttpApiConfig config = small_config(),
                      std::function<void(FakeRouterService&)> setup = nullptr)
      : api(service, config) {
    if (setup) setup(service);
    auto started = api.start("127.0.0.1", 0);
    REQUIRE(started.ok());
    port = *started;
  }

  // keep_alive: reuse one connection, as a benchmark client would (httplib closes after each by default).
  httplib::Client client(bool keep_alive = false) const {
    httplib::Client c("127.0.0.1", port);
    c.set_keep_alive(keep_alive);
    c.set_tcp_nodelay(true);  // with keep-alive, Nagle + delayed ACK would hold each body back 40 ms
    c.set_connection_timeout(2);
    c.set_read_timeout(5);
    return c;
  }
};

}  // namespace epd::http::test

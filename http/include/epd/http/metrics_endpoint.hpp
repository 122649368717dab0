#pragma once
// `GET /metrics` on its own address (a role's `metrics = "HOST:PORT"`): the Prometheus text format from a
// render function, so this layer needs no metrics library and the caller decides what is exported. One I/O
// thread, no worker pool, small limits: a scraper sends a few short requests a minute.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "epd/http/http_server.hpp"

namespace epd::http {

class MetricsEndpoint {
 public:
  explicit MetricsEndpoint(std::function<std::string()> render);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Binds and serves; port 0 picks a free one. Errors as HttpServer::start.
  protocol::Result<uint16_t> start(const std::string& host, uint16_t port);
  void stop();

 private:
  std::function<std::string()> render_;
  std::unique_ptr<HttpServer> server_;
};

}  // namespace epd::http

#pragma once
// `GET /metrics` on its own address (a role's `metrics = "HOST:PORT"`): the Prometheus text format from a
// render function, so this layer needs no metrics library and the caller decides what is exported. One I/O
// thread, no worker pool, small limits: a scraper sends a few short requests a minute.
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "epd/http/api_keys.hpp"
#include "epd/http/http_server.hpp"

namespace epd::http {

// Who may scrape: with `keys`, GET /metrics needs `Authorization: Bearer <one of them>` (Prometheus:
// `authorization: {credentials_file: ...}`), else 401; with `tls`, the listener speaks TLS only.
struct MetricsAccess {
  std::shared_ptr<const ApiKeys> keys;
  std::optional<TlsFiles> tls;
};

class MetricsEndpoint {
 public:
  explicit MetricsEndpoint(std::function<std::string()> render, MetricsAccess access = {});
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  // Binds and serves; port 0 picks a free one. Errors as HttpServer::start.
  protocol::Result<uint16_t> start(const std::string& host, uint16_t port);
  void stop();
  // Scrapes refused for a missing or wrong key.
  uint64_t unauthorized() const { return unauthorized_->load(); }
  // The same count, shared: it outlives the endpoint (for a collector that may run later).
  std::shared_ptr<const std::atomic<uint64_t>> unauthorized_counter() const { return unauthorized_; }
  bool tls() const { return access_.tls.has_value(); }

 private:
  std::function<std::string()> render_;
  MetricsAccess access_;
  std::shared_ptr<std::atomic<uint64_t>> unauthorized_ = std::make_shared<std::atomic<uint64_t>>(0);
  std::unique_ptr<HttpServer> server_;
};

}  // namespace epd::http

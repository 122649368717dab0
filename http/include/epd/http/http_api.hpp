#pragma once
// The router's HTTP front end (cpp-httplib): parses and checks requests, calls a RouterService, renders JSON.
// Plain threads, no actors; routes and every status are documented in docs/http-api.md.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "epd/http/http_request.hpp"
#include "epd/http/router_service.hpp"
#include "epd/protocol/result.hpp"

namespace httplib {
class Server;
}

namespace epd::http {

struct HttpApiConfig {
  size_t max_body_bytes = 24 * 1024 * 1024;  // room for a max-size image in base64 (4/3) plus the prompt
  GenerateLimits generate;
  unsigned threads = 8;  // concurrent connections served; each blocks in generate() for a whole request
  std::chrono::milliseconds read_timeout{5000};   // per socket read while receiving a request
  std::chrono::milliseconds write_timeout{5000};  // per socket write while sending a reply
  // An idle keep-alive connection holds a thread this long, and stop() may wait for it.
  std::chrono::seconds keep_alive_timeout{2};
  size_t keep_alive_max_requests = 100;
};

class HttpApi {
 public:
  // `service` must outlive the HttpApi (or at least its stop()).
  explicit HttpApi(RouterService& service, HttpApiConfig config = {});
  ~HttpApi();  // stops
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  // Binds host:port (port 0 picks a free one) and serves on background threads. Returns the bound port;
  // config_error for an invalid config or when already started, io_error when the address cannot be bound
  // (e.g. the port is in use).
  protocol::Result<uint16_t> start(const std::string& host, uint16_t port);

  // Stops accepting, then waits for in-flight requests (each bounded by the service's request timeout) and
  // idle keep-alive connections (keep_alive_timeout). Idempotent; start() may be called again afterwards.
  void stop();

  bool running() const;
  uint16_t port() const;  // 0 when not running
  const HttpApiConfig& config() const { return config_; }

 private:
  void install_routes(httplib::Server& server);

  RouterService& service_;
  const HttpApiConfig config_;
  mutable std::mutex mu_;  // guards start/stop against each other
  std::unique_ptr<httplib::Server> server_;
  std::thread listener_;
  uint16_t port_ = 0;
};

}  // namespace epd::http

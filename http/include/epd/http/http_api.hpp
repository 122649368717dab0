#pragma once
// The router's HTTP API on an asynchronous server (http_server.hpp): the OpenAI routes
// (/v1/completions, /v1/chat/completions, /v1/responses, /v1/models), Anthropic's /v1/messages and
// /v1/messages/count_tokens, the native /v1/generate, health, instances, stats,
// the recent activity and the dashboard page at /. Parses and checks requests, hands generations to a
// RouterService and streams their tokens back. Every route and status is documented in docs/http-api.md.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "epd/http/api_keys.hpp"
#include "epd/http/auth_throttle.hpp"
#include "epd/http/http_request.hpp"
#include "epd/http/http_server.hpp"
#include "epd/http/router_service.hpp"
#include "epd/protocol/result.hpp"

namespace epd::http {

struct HttpApiConfig {
  ServerLimits server;
  GenerateLimits generate;        // prompt, image and max_tokens limits of every generation route
  size_t activity_entries = 256;  // finished requests GET /v1/activity keeps (0: none)
  // When set, every route but /health, /health/live, /health/ready and the dashboard's files needs
  // `Authorization: Bearer <one of them>` (401 otherwise, before any body byte is read).
  std::shared_ptr<const ApiKeys> api_keys;
  AuthThrottleLimits auth_throttle;  // with api_keys: how many failures an address may have
  std::optional<TlsFiles> tls;       // when set, the listener speaks TLS only
};

struct ApiContext;

class HttpApi {
 public:
  // `service` must outlive the HttpApi (or at least its stop()).
  explicit HttpApi(RouterService& service, HttpApiConfig config = {});
  ~HttpApi();  // stops
  HttpApi(const HttpApi&) = delete;
  HttpApi& operator=(const HttpApi&) = delete;

  // Binds host:port (port 0 picks a free one) and serves. Returns the bound port; config_error for an
  // invalid config or when already started, io_error when the address cannot be bound.
  protocol::Result<uint16_t> start(const std::string& host, uint16_t port);

  // Graceful stop, first half: closes the listener, answers new generation requests 503 and
  // /health/ready 503, and waits until the generations in flight are answered or `grace` has passed.
  // Returns how many were still running then.
  size_t drain(std::chrono::milliseconds grace);

  // Closes every connection (a generation still running is cancelled) and joins the server's threads.
  // Idempotent.
  void stop();

  bool running() const;
  uint16_t port() const;                    // 0 when not running
  size_t in_flight() const;                 // generations started and not yet answered
  uint64_t unauthorized() const;            // requests refused 401 for a missing or wrong API key
  uint64_t auth_throttled() const;          // requests refused 429 while their address cooled down
  uint64_t tls_handshake_failures() const;  // of the current listener (0 when not running or plain)
  const HttpApiConfig& config() const { return config_; }

 private:
  const HttpApiConfig config_;
  std::shared_ptr<ApiContext> ctx_;
  mutable std::mutex mu_;  // guards start/stop against each other
  std::unique_ptr<HttpServer> server_;
  uint16_t port_ = 0;
};

}  // namespace epd::http

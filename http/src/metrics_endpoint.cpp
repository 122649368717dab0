#include "epd/http/metrics_endpoint.hpp"

#include <exception>

#include "bearer_auth.hpp"

namespace epd::http {
namespace {

constexpr const char* kText = "text/plain; charset=utf-8";
// The content type Prometheus expects from a text-format target.
constexpr const char* kExposition = "text/plain; version=0.0.4; charset=utf-8";

ServerLimits metrics_limits() {
  ServerLimits l;
  l.io_threads = 1;
  l.work_threads = 1;
  l.max_header_bytes = 8 * 1024;
  l.max_body_bytes = 1024;  // scrapes have no body; a stray one is refused by the method check
  l.max_connections = 64;
  return l;
}

HeadVerdict check(const HttpRequest& req, const ApiKeys* keys, AuthThrottle& throttle,
                  std::atomic<uint64_t>& unauthorized) {
  // The key first: a stranger learns nothing, not even which paths exist.
  if (keys) {
    if (auto refusal = check_bearer(*keys, throttle, req)) {
      if (refusal->error.status == 401) ++unauthorized;
      return {refusal->error.status, refusal->error.message + "\n", kText, std::move(refusal->headers)};
    }
  }
  if (req.path != "/metrics") return {404, "only /metrics is served here\n", kText, {}};
  if (req.method != "GET" && req.method != "HEAD") return {405, "use GET\n", kText, {{"Allow", "GET, HEAD"}}};
  return {};
}

}  // namespace

MetricsEndpoint::MetricsEndpoint(std::function<std::string()> render, MetricsAccess access)
    : render_(std::move(render)), access_(std::move(access)) {}

MetricsEndpoint::~MetricsEndpoint() {
  stop();
}

protocol::Result<uint16_t> MetricsEndpoint::start(const std::string& host, uint16_t port) {
  ServerHandlers h;
  h.check_head = [keys = access_.keys, throttle = std::make_shared<AuthThrottle>(),
                  unauthorized = unauthorized_](const HttpRequest& req) {
    return check(req, keys.get(), *throttle, *unauthorized);
  };
  h.handle = [render = render_](ExchangePtr ex) {
    try {
      ex->respond(200, render(), kExposition);
    } catch (const std::exception& e) {
      ex->respond(500, std::string("rendering the metrics failed: ") + e.what() + "\n", kText);
    }
  };
  h.error_body = [](int, std::string_view message) { return std::string(message) + "\n"; };
  server_ = std::make_unique<HttpServer>(metrics_limits(), std::move(h), access_.tls);
  return server_->start(host, port);
}

void MetricsEndpoint::stop() {
  if (server_) server_->stop();
}

}  // namespace epd::http

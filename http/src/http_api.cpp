#include "epd/http/http_api.hpp"

#include <malloc.h>

#include <optional>
#include <random>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "anthropic_reply.hpp"
#include "api_context.hpp"
#include "bearer_auth.hpp"
#include "dashboard_route.hpp"
#include "epd/http/openai_reply.hpp"
#include "http_reply.hpp"

namespace epd::http {
namespace {

using protocol::ErrorCode;
using protocol::make_error;

constexpr const char* kJson = "application/json";

enum class Route {
  none,
  generate,
  completions,
  chat,
  models,
  health,
  live,
  ready,
  instances,
  stats,
  activity,
  tokenize,
  detokenize,
  responses,
  messages,
  count_tokens,
  dashboard
};

struct RouteInfo {
  const char* path;
  Route route;
  bool post;  // else GET/HEAD
};

// clang-format off
constexpr RouteInfo kRoutes[] = {
    {"/v1/chat/completions", Route::chat, true},
    {"/v1/completions", Route::completions, true},
    {"/v1/generate", Route::generate, true},
    {"/v1/responses", Route::responses, true},
    {"/v1/messages", Route::messages, true},
    {"/v1/messages/count_tokens", Route::count_tokens, true},
    {"/v1/models", Route::models, false},
    {"/health", Route::health, false},
    {"/health/live", Route::live, false},
    {"/health/ready", Route::ready, false},
    {"/v1/instances", Route::instances, false},
    {"/v1/stats", Route::stats, false},
    {"/v1/activity", Route::activity, false},
    {"/tokenize", Route::tokenize, true},
    {"/detokenize", Route::detokenize, true},
    {"/", Route::dashboard, false},
};
// clang-format on

// The dashboard's script, style sheet and icon: GET routes too, left out of the route list of a 404.
constexpr RouteInfo kDashboardFile = {"/dashboard/", Route::dashboard, false};

const RouteInfo* find_route(std::string_view path) {
  for (const auto& r : kRoutes)
    if (path == r.path) return &r;
  if (is_dashboard_path(path)) return &kDashboardFile;
  return nullptr;
}

std::string route_list() {
  std::string out;
  for (const auto& r : kRoutes) {
    if (!out.empty()) out += ", ";
    out += std::string(r.post ? "POST " : "GET ") + r.path;
  }
  return out;
}

// Request paths and similar client-chosen text go into messages; keep them short.
std::string clip(std::string_view s) {
  return s.size() <= 200 ? std::string(s) : std::string(s.substr(0, 200)) + "...";
}

// Anthropic's clients read Anthropic's error shape on its routes.
HeadVerdict verdict(const HttpError& e, std::vector<HttpHeader> headers = {},
                    const RouteInfo* route = nullptr) {
  const bool anthropic = route && (route->route == Route::messages || route->route == Route::count_tokens);
  return {e.status, anthropic ? anthropic::error_body(e) : openai::error_body(e), kJson, std::move(headers)};
}

// Health probes (load balancers, orchestrators) carry no key, and the dashboard's files are public; the page
// sends a key on the API calls it makes.
bool needs_key(Route r) {
  return r != Route::health && r != Route::live && r != Route::ready && r != Route::dashboard;
}

// Everything decidable from the request line and headers, checked before any body byte is read.
HeadVerdict check_head(ApiContext& ctx, const HttpRequest& req) {
  const RouteInfo* route = find_route(req.path);
  if (!route)
    return verdict({404, "not_found", "no route for " + clip(req.path) + "; routes: " + route_list()});
  if (ctx.config.api_keys && needs_key(route->route)) {
    if (auto refusal = check_bearer(*ctx.config.api_keys, ctx.auth_throttle, req)) {
      if (refusal->error.status == 401) ++ctx.unauthorized;
      return verdict(refusal->error, std::move(refusal->headers), route);
    }
  }
  const bool ok = route->post ? req.method == "POST" : (req.method == "GET" || req.method == "HEAD");
  if (!ok) {
    const char* allow = route->post ? "POST" : "GET, HEAD";
    return verdict(
        {405, "method_not_allowed",
         req.method + " is not allowed on " + req.path + "; use " + (route->post ? "POST" : "GET")},
        {{"Allow", allow}}, route);
  }
  // Compressed bodies would be inflated past every size check; nobody needs them for this API.
  if (auto enc = req.header("Content-Encoding"); enc && !enc->empty() && *enc != "identity")
    return verdict({415, "unsupported_media_type",
                    "Content-Encoding \"" + clip(*enc) + "\" is not supported; send the body uncompressed"},
                   {}, route);
  if (auto type = req.header("Content-Type"); route->post && type && type->starts_with("multipart/"))
    return verdict({415, "unsupported_media_type", "multipart bodies are not supported; send a JSON object"},
                   {}, route);
  return {};
}

std::optional<protocol::Error> validate(const HttpApiConfig& c) {
  auto bad = [](std::string what) { return make_error(ErrorCode::config_error, "http: " + std::move(what)); };
  const auto& g = c.generate;
  const auto& s = c.server;
  if (s.io_threads == 0) return bad("io_threads must be at least 1");
  if (s.work_threads == 0) return bad("work_threads must be at least 1");
  if (s.max_body_bytes == 0) return bad("max_body_bytes must be at least 1");
  if (s.max_connections == 0) return bad("max_connections must be at least 1");
  if (g.max_prompt_bytes == 0) return bad("max_prompt_bytes must be at least 1");
  if (g.max_tokens_limit == 0) return bad("max_tokens_limit must be at least 1");
  if (g.default_max_tokens == 0 || g.default_max_tokens > g.max_tokens_limit)
    return bad("default_max_tokens must be in 1..max_tokens_limit (" + std::to_string(g.max_tokens_limit) +
               ")");
  if (g.max_json_depth < 1) return bad("max_json_depth must be at least 1");
  if (s.request_timeout.count() <= 0 || s.write_timeout.count() <= 0 || s.idle_timeout.count() <= 0)
    return bad("timeouts must be positive");
  if (s.max_requests_per_connection == 0) return bad("max_requests_per_connection must be at least 1");
  return std::nullopt;
}

void handle_info(ApiContext& ctx, Route route, ExchangePtr exchange) {
  Exchange& ex = *exchange;
  switch (route) {
    case Route::health:
    case Route::live:
      return reply_json(ex, 200, R"({"status":"live"})");
    case Route::ready: {
      if (ctx.draining) return reply_json(ex, 503, R"({"status":"draining"})");
      auto r = ctx.service.readiness();
      if (r.ready) return reply_json(ex, 200, R"({"status":"ready"})");
      return reply_json(ex, 503, nlohmann::json{{"status", "not_ready"}, {"reason", r.reason}}.dump());
    }
    case Route::models:
      return reply_json(ex, 200, models_json(ctx.service.model_id()));
    case Route::instances:
      return reply_json(ex, 200, instances_json(ctx.service.instances()));
    case Route::stats:
      // Answered from the router's thread: no I/O thread waits for it.
      return ctx.service.stats([exchange](RouterStats s) { reply_json(*exchange, 200, stats_json(s)); });
    case Route::activity:
      return reply_json(ex, 200, activity_json(ctx.activity.snapshot()));
    case Route::dashboard:
      return handle_dashboard(ex);
    default:
      return reply_error(ex, {500, "internal", "unrouted request"});
  }
}

}  // namespace

std::optional<std::string> request_id_of(const HttpRequest& request) {
  if (auto given = request.header("X-Request-Id")) {
    if (given->empty() || given->size() > 128) return std::nullopt;
    for (char c : *given)
      if (c <= 0x20 || c >= 0x7f) return std::nullopt;
    return std::string(*given);
  }
  return random_hex(16);
}

std::string random_hex(size_t digits) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out(digits, '0');
  uint64_t bits = 0;
  for (size_t i = 0; i < digits; ++i, bits >>= 4) {
    if (i % 16 == 0) bits = rng();
    out[i] = kHex[bits & 0xf];
  }
  return out;
}

std::optional<std::string> admit_generation(ApiContext& ctx, Exchange& ex, ErrorBody shape) {
  auto id = request_id_of(ex.request());
  if (!id) {
    reply_error(ex, {400, "invalid_request", "X-Request-Id must be 1..128 visible ASCII characters"}, {},
                shape);
    return std::nullopt;
  }
  if (ctx.draining) {
    reply_error(ex, {503, "unavailable", "the router is shutting down; send the request elsewhere"},
                {{"X-Request-Id", *id}}, shape);
    return std::nullopt;
  }
  return id;
}

void reply_json(Exchange& ex, int status, std::string body, std::vector<HttpHeader> headers) {
  ex.respond(status, std::move(body), kJson, std::move(headers));
}

void reply_error(Exchange& ex, const HttpError& e, std::vector<HttpHeader> headers, ErrorBody shape) {
  reply_json(ex, e.status, shape ? shape(e) : openai::error_body(e), std::move(headers));
}

HttpError failure_error(const GenerateResponse& out) {
  if (out.http_status >= 400 && out.http_status <= 599) {
    std::string code = out.error_code.empty() ? "internal" : out.error_code;
    std::string message =
        out.error.empty() ? "request failed (HTTP " + std::to_string(out.http_status) + ")" : out.error;
    return {out.http_status, std::move(code), std::move(message)};
  }
  return {500, "internal", "router returned HTTP status " + std::to_string(out.http_status)};
}

void note_finished(ApiContext& ctx, const char* route, const std::string& request_id, bool stream,
                   const GenerateResponse& r, uint32_t completion_tokens, const HttpError* failure) {
  ActivityEntry e;
  e.request_id = request_id;
  e.route = route;
  e.stream = stream;
  e.status = failure ? failure->status : 200;
  if (failure) {
    e.error_code = failure->code;
    e.error = failure->message;
  }
  e.first_token_ms = r.timings.first_token_ms;
  e.total_ms = r.timings.total_ms;
  e.prompt_tokens = r.prompt_tokens;
  e.completion_tokens = completion_tokens;
  e.attempts = r.attempts;
  ctx.activity.record(std::move(e));
}

void reply_failure(Exchange& ex, const GenerateResponse& out, std::vector<HttpHeader> headers) {
  if (out.retry_after_s > 0) headers.push_back({"Retry-After", std::to_string(out.retry_after_s)});
  reply_error(ex, failure_error(out), std::move(headers));
}

HttpApi::HttpApi(RouterService& service, HttpApiConfig config)
    : config_(std::move(config)), ctx_(std::make_shared<ApiContext>(service, config_)) {}

HttpApi::~HttpApi() {
  stop();
}

bool HttpApi::running() const {
  std::lock_guard lock(mu_);
  return server_ != nullptr;
}

uint16_t HttpApi::port() const {
  std::lock_guard lock(mu_);
  return port_;
}

size_t HttpApi::in_flight() const {
  return ctx_->in_flight();
}

uint64_t HttpApi::auth_throttled() const {
  return ctx_->auth_throttle.throttled();
}

uint64_t HttpApi::unauthorized() const {
  return ctx_->unauthorized.load();
}

uint64_t HttpApi::tls_handshake_failures() const {
  std::lock_guard lock(mu_);
  return server_ ? server_->tls_handshake_failures() : 0;
}

protocol::Result<uint16_t> HttpApi::start(const std::string& host, uint16_t port) {
  std::lock_guard lock(mu_);
  if (server_)
    return make_error(ErrorCode::config_error, "http: already listening on port " + std::to_string(port_));
  if (auto err = validate(config_)) return *err;

  // Bodies up to max_body_bytes are read whole (a 10 MiB body may carry a legitimate image). glibc raises its
  // mmap threshold to the largest block freed (up to 32 MiB); from then on such buffers came from the
  // server threads' malloc arenas and stayed there after being freed. A fixed threshold (which also turns
  // the dynamic one off) gives every block of 1 MiB or more its own mapping, returned to the system when
  // freed. Process-wide, and harmless for the router's small blocks.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);

  ServerHandlers handlers;
  handlers.check_head = [ctx = ctx_](const HttpRequest& req) { return check_head(*ctx, req); };
  handlers.error_body = [](int status, std::string_view message) {
    const char* code = status == 413   ? "oversized"
                       : status == 503 ? "unavailable"
                       : status >= 500 ? "internal"
                                       : "invalid_request";
    return openai::error_body({status, code, std::string(message)});
  };
  handlers.handle = [ctx = ctx_](ExchangePtr ex) {
    const RouteInfo* route = find_route(ex->request().path);
    if (!route) return reply_error(*ex, {404, "not_found", "no route"});
    switch (route->route) {
      case Route::generate:
        return handle_generate(ctx, std::move(ex));
      case Route::completions:
        return handle_completions(ctx, std::move(ex));
      case Route::chat:
        return handle_chat(ctx, std::move(ex));
      case Route::responses:
        return handle_responses(ctx, std::move(ex));
      case Route::messages:
        return handle_messages(ctx, std::move(ex));
      case Route::count_tokens:
        return handle_count_tokens(ctx, std::move(ex));
      case Route::tokenize:
        return handle_tokenize(*ctx, std::move(ex));
      case Route::detokenize:
        return handle_detokenize(*ctx, std::move(ex));
      default:
        return handle_info(*ctx, route->route, std::move(ex));
    }
  };
  ctx_->draining = false;
  auto server = std::make_unique<HttpServer>(config_.server, std::move(handlers), config_.tls);
  auto bound = server->start(host, port);
  if (!bound) return bound.error();
  server_ = std::move(server);
  port_ = *bound;
  spdlog::info("http: listening on {}:{} ({}{})", host, port_, config_.tls ? "TLS" : "plain HTTP",
               config_.api_keys ? ", API keys required" : "");
  return port_;
}

size_t HttpApi::drain(std::chrono::milliseconds grace) {
  std::future<void> closed;
  {
    std::lock_guard lock(mu_);
    if (!server_) return 0;
    closed = server_->stop_accepting();
  }
  // The port is shut before anyone is told "draining" (a client told so cannot connect again); bounded,
  // and waited for outside the lock, which handlers on the I/O threads may take.
  closed.wait_for(std::chrono::seconds(2));
  ctx_->draining = true;
  spdlog::info("http: draining: no new requests; waiting up to {} ms for {} in flight", grace.count(),
               ctx_->in_flight());
  size_t left = ctx_->wait_idle(grace);
  if (left > 0) spdlog::warn("http: {} request(s) still in flight after the drain grace period", left);
  return left;
}

void HttpApi::stop() {
  std::lock_guard lock(mu_);
  if (!server_) return;
  server_->stop();
  server_.reset();
  spdlog::info("http: stopped listening on port {}", port_);
  port_ = 0;
}

}  // namespace epd::http

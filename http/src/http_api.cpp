#include "epd/http/http_api.hpp"

#include <malloc.h>
#include <netdb.h>
#include <sys/socket.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>

#include <httplib.h>
#include <spdlog/spdlog.h>

#include "http_reply.hpp"

namespace epd::http {
namespace {

using httplib::Request;
using httplib::Response;
using protocol::ErrorCode;
using protocol::make_error;
using HandlerResponse = httplib::Server::HandlerResponse;

constexpr const char* kJson = "application/json";
constexpr const char* kRouteList = "POST /v1/generate, GET /health, GET /v1/instances, GET /v1/stats";

enum class Route { none, generate, health, instances, stats };

Route find_route(const std::string& path) {
  if (path == "/v1/generate") return Route::generate;
  if (path == "/health") return Route::health;
  if (path == "/v1/instances") return Route::instances;
  if (path == "/v1/stats") return Route::stats;
  return Route::none;
}

bool method_allowed(Route route, const std::string& method) {
  if (route == Route::generate) return method == "POST";
  return method == "GET" || method == "HEAD";
}

// Request paths and similar client-chosen text go into messages; keep them short.
std::string clip(std::string_view s) {
  return s.size() <= 200 ? std::string(s) : std::string(s.substr(0, 200)) + "...";
}

void reply(Response& res, int status, std::string body) {
  res.status = status;
  res.set_content(std::move(body), kJson);
}

void reply_error(Response& res, const HttpError& e) {
  reply(res, e.status, error_json(e.code, e.message));
}

bool carries_body(const Request& req) {
  return req.has_header("Transfer-Encoding") ||
         (req.has_header("Content-Length") && req.get_header_value("Content-Length") != "0");
}

std::optional<uint64_t> content_length(const Request& req) {
  if (!req.has_header("Content-Length")) return std::nullopt;
  const auto& v = req.get_header_value("Content-Length");
  uint64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc{} || p != v.data() + v.size()) return std::nullopt;
  return n;
}

HttpError body_too_large(size_t limit) {
  return {413, "oversized", "request body exceeds the limit of " + std::to_string(limit) + " bytes"};
}

// Everything decidable from the request line and headers, checked before any body byte is read.
std::optional<HttpError> check_head(const Request& req) {
  Route route = find_route(req.path);
  if (route == Route::none) {
    return HttpError{404, "not_found", "no route for " + clip(req.path) + "; routes: " + kRouteList};
  }
  if (!method_allowed(route, req.method)) {
    return HttpError{405, "method_not_allowed",
                     req.method + " is not allowed on " + req.path + "; use " +
                         (route == Route::generate ? "POST" : "GET")};
  }
  // Compressed bodies would be inflated past every size check; nobody needs them for this API.
  if (auto enc = req.get_header_value("Content-Encoding"); !enc.empty() && enc != "identity") {
    return HttpError{415, "unsupported_media_type",
                     "Content-Encoding \"" + clip(enc) + "\" is not supported; send the body uncompressed"};
  }
  if (route == Route::generate && req.is_multipart_form_data()) {
    return HttpError{415, "unsupported_media_type", "multipart bodies are not supported; send a JSON object"};
  }
  return std::nullopt;
}

// Bodies for the statuses httplib produces on its own (malformed request line, limits, unmatched routes).
HttpError default_error(int status, size_t max_body) {
  switch (status) {
    case 400:
      return {400, "invalid_request", "malformed HTTP request"};
    case 404:
      return {404, "not_found", std::string("no such route; routes: ") + kRouteList};
    case 413:
      return body_too_large(max_body);
    case 414:
      return {414, "invalid_request", "request line too long"};
    case 416:
      return {416, "invalid_request", "invalid Range header"};
    case 500:
      return {500, "internal", "internal server error"};
    default:
      return {status, status < 500 ? "invalid_request" : "internal", "HTTP error " + std::to_string(status)};
  }
}

std::string allow_header(const Request& req) {
  return find_route(req.path) == Route::generate ? "POST" : "GET, HEAD";
}

// A check_head() rejection; 405 says which method would do.
void reply_head_error(const Request& req, Response& res, const HttpError& err) {
  reply_error(res, err);
  if (err.status == 405) res.set_header("Allow", allow_header(req));
}

void reply_service_result(Response& res, const GenerateResponse& out) {
  if (out.http_status == 200) return reply(res, 200, generate_reply_json(out));
  if (out.http_status >= 400 && out.http_status <= 599) {
    std::string code = out.error_code.empty() ? "internal" : out.error_code;
    std::string message =
        out.error.empty() ? "request failed (HTTP " + std::to_string(out.http_status) + ")" : out.error;
    return reply(res, out.http_status, error_json(code, message));
  }
  reply(res, 500, error_json("internal", "router returned HTTP status " + std::to_string(out.http_status)));
}

std::optional<protocol::Error> validate(const HttpApiConfig& c) {
  auto bad = [](std::string what) { return make_error(ErrorCode::config_error, "http: " + std::move(what)); };
  const auto& g = c.generate;
  if (c.threads == 0) return bad("threads must be at least 1");
  if (c.max_body_bytes == 0) return bad("max_body_bytes must be at least 1");
  if (g.max_prompt_bytes == 0) return bad("max_prompt_bytes must be at least 1");
  if (g.max_tokens_limit == 0) return bad("max_tokens_limit must be at least 1");
  if (g.default_max_tokens == 0 || g.default_max_tokens > g.max_tokens_limit) {
    return bad("default_max_tokens must be in 1..max_tokens_limit (" + std::to_string(g.max_tokens_limit) +
               ")");
  }
  if (g.max_json_depth < 1) return bad("max_json_depth must be at least 1");
  if (c.read_timeout.count() <= 0 || c.write_timeout.count() <= 0 || c.keep_alive_timeout.count() <= 0) {
    return bad("timeouts must be positive");
  }
  if (c.keep_alive_max_requests == 0) return bad("keep_alive_max_requests must be at least 1");
  return std::nullopt;
}

// httplib reports a failed bind as -1 without a reason; resolve first so a bad host gets its own message.
std::optional<protocol::Error> check_host(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    return make_error(ErrorCode::config_error,
                      "http: cannot resolve host '" + host + "': " + gai_strerror(rc));
  }
  freeaddrinfo(result);
  return std::nullopt;
}

}  // namespace

HttpApi::HttpApi(RouterService& service, HttpApiConfig config)
    : service_(service), config_(std::move(config)) {}

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

protocol::Result<uint16_t> HttpApi::start(const std::string& host, uint16_t port) {
  std::lock_guard lock(mu_);
  if (server_) {
    return make_error(ErrorCode::config_error, "http: already listening on port " + std::to_string(port_));
  }
  if (auto err = validate(config_)) return *err;
  if (auto err = check_host(host)) return *err;

  // Bodies up to max_body_bytes are read whole (a 10 MiB body may carry a legitimate image). glibc raises its
  // mmap threshold to the largest block freed (up to 32 MiB); from then on such buffers came from the HTTP
  // threads' malloc arenas and stayed there after being freed: 50 refused 10 MiB bodies left the router at
  // 259 MB. A fixed threshold (which also turns the dynamic one off) gives every block of 1 MiB or more its
  // own mapping, returned to the system when freed. Process-wide, and harmless for the router's small blocks.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  auto server = std::make_unique<httplib::Server>();
  install_routes(*server);
  // httplib's default socket options add SO_REUSEPORT, which lets a second router silently share a busy port.
  // Keep only SO_REUSEADDR (quick restarts over TIME_WAIT) so "port in use" is reported. Remember the socket:
  // its backlog is raised below.
  auto listen_fd = std::make_shared<int>(-1);
  server->set_socket_options([listen_fd](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    *listen_fd = sock;
  });

  errno = 0;
  int bound = port == 0 ? server->bind_to_any_port(host) : (server->bind_to_port(host, port) ? port : -1);
  if (bound < 0) {
    int e = errno;
    std::string where = host + ":" + std::to_string(port);
    if (e == EADDRINUSE) return make_error(ErrorCode::io_error, "http: " + where + " is already in use");
    return make_error(ErrorCode::io_error,
                      "http: cannot listen on " + where + ": " + (e != 0 ? std::strerror(e) : "bind failed"));
  }

  // Debian's library listens with a backlog of 5: a burst of more connects drops SYNs and the client retries
  // a second later. On Linux, listen() again on the bound socket just raises the backlog.
  ::listen(*listen_fd, SOMAXCONN);

  httplib::Server* s = server.get();
  listener_ = std::thread([s] { s->listen_after_bind(); });
  // httplib's stop() does nothing until the listener has marked itself running (its first statement), so
  // wait for that: afterwards stop() can never be lost.
  while (!s->is_running()) std::this_thread::sleep_for(std::chrono::microseconds(100));

  server_ = std::move(server);
  port_ = static_cast<uint16_t>(bound);
  spdlog::info("http: listening on {}:{}", host, port_);
  return port_;
}

void HttpApi::stop() {
  std::lock_guard lock(mu_);
  if (!server_) return;
  server_->stop();  // closes the listening socket; the thread pool then drains its connections
  listener_.join();
  server_.reset();
  spdlog::info("http: stopped listening on port {}", port_);
  port_ = 0;
}

void HttpApi::install_routes(httplib::Server& server) {
  const auto& c = config_;
  auto threads = c.threads;
  server.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  server.set_payload_max_length(c.max_body_bytes);
  server.set_read_timeout(c.read_timeout.count() / 1000, (c.read_timeout.count() % 1000) * 1000);
  server.set_write_timeout(c.write_timeout.count() / 1000, (c.write_timeout.count() % 1000) * 1000);
  server.set_keep_alive_timeout(c.keep_alive_timeout.count());
  server.set_keep_alive_max_count(c.keep_alive_max_requests);
  server.set_tcp_nodelay(true);  // headers and body go out as two writes; don't let Nagle delay the second

  server.set_expect_100_continue_handler([this](const Request& req, Response& res) {
    auto err = check_head(req);
    if (!err && content_length(req).value_or(0) > config_.max_body_bytes) {
      err = body_too_large(config_.max_body_bytes);
    }
    if (!err) return 100;
    reply_head_error(req, res, *err);
    res.set_header("Connection", "close");  // the client may not send the body now; don't read it
    return err->status;
  });

  server.set_pre_routing_handler([](const Request& req, Response& res) {
    auto err = check_head(req);
    if (!err) return HandlerResponse::Unhandled;
    reply_head_error(req, res, *err);
    // Its body is left unread, so this connection cannot carry another request.
    if (carries_body(req)) res.set_header("Connection", "close");
    return HandlerResponse::Handled;
  });

  server.set_error_handler([this](const Request&, Response& res) {
    if (res.body.empty()) reply_error(res, default_error(res.status, config_.max_body_bytes));
  });

  server.set_exception_handler([](const Request& req, Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    spdlog::error("http: {} {} failed: {}", req.method, clip(req.path), what);
    reply(res, 500, error_json("internal", "internal error: " + what));
  });

  server.set_logger([](const Request& req, const Response& res) {
    if (res.status < 400) return;
    auto level = res.status >= 500 ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(level, "http: {}:{} {} {} -> {} {}", req.remote_addr, req.remote_port, req.method,
                clip(req.path), res.status, clip(res.body));
  });

  server.Post("/v1/generate", [this](const Request&, Response& res, const httplib::ContentReader& read) {
    // Read through our own cap: chunked and length-less bodies bypass httplib's payload limit.
    const size_t limit = config_.max_body_bytes;
    std::string body;
    bool over = false;
    bool complete = read([&](const char* data, size_t n) {
      if (n > limit - body.size()) {
        over = true;
        return false;  // stop reading
      }
      body.append(data, n);
      return true;
    });
    if (over || (!complete && res.status == 413)) {
      reply_error(res, body_too_large(limit));
      res.set_header("Connection", "close");  // the rest of the body is still in flight
      return;
    }
    if (!complete) {
      reply_error(res,
                  {400, "invalid_request", "request body is truncated or its chunked encoding is malformed"});
      res.set_header("Connection", "close");
      return;
    }
    auto parsed = parse_generate_request(body, config_.generate);
    if (auto* err = std::get_if<HttpError>(&parsed)) return reply_error(res, *err);
    std::string().swap(body);  // the request holds the decoded image now; drop the base64 copy
    reply_service_result(res, service_.generate(std::get<GenerateRequest>(parsed)));
  });

  server.Get("/health", [this](const Request&, Response& res) {
    if (service_.healthy()) return reply(res, 200, R"({"status":"ok"})");
    reply(res, 503, R"({"status":"unhealthy"})");
  });
  server.Get("/v1/instances", [this](const Request&, Response& res) {
    reply(res, 200, instances_json(service_.instances()));
  });
  server.Get("/v1/stats",
             [this](const Request&, Response& res) { reply(res, 200, stats_json(service_.stats())); });
}

}  // namespace epd::http

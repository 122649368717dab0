#pragma once
// An asynchronous HTTP/1.1 server (Boost.Beast parser over Asio): a few I/O threads serve every connection,
// so an idle, trickling or streaming client costs a socket and a buffer, never a thread. Routes see plain
// structs (no Beast types) through an Exchange, which may be answered later from any thread — the router
// answers from its actor — and may stream (chunked transfer encoding, used for server-sent events).
// docs/architecture.md ("The HTTP front door") explains the choice and the limits.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epd/protocol/result.hpp"

namespace epd::http {
namespace detail {
struct ServerCore;
}

struct ServerLimits {
  unsigned io_threads = 2;
  unsigned work_threads = 2;             // handle requests whose body exceeds inline_body_bytes
  size_t inline_body_bytes = 64 * 1024;  // smaller bodies are handled on the I/O thread (cheap to parse)
  size_t max_header_bytes = 16 * 1024;
  size_t max_body_bytes = 24 * 1024 * 1024;
  // A whole request (head and body) must arrive within this after its first byte is awaited: a client that
  // trickles or stalls is disconnected, whatever it sends.
  std::chrono::milliseconds request_timeout{10000};
  std::chrono::milliseconds idle_timeout{5000};    // a keep-alive connection waiting for its next request
  std::chrono::milliseconds write_timeout{10000};  // one write to a client that does not read
  size_t max_connections = 10000;                  // more are answered 503 and closed at once
  size_t max_requests_per_connection = 1000;
  // Unsent output a streaming reply may queue for a client that reads slower than it is fed; beyond it the
  // connection is closed (the exchange sees a disconnect and cancels its work).
  size_t max_pending_output = 4 * 1024 * 1024;
};

struct HttpHeader {
  std::string name;
  std::string value;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // as sent: path and query
  std::string path;    // target without the query
  std::vector<HttpHeader> headers;
  std::string body;
  std::string remote;     // "address:port"
  bool has_body = false;  // Content-Length > 0 or chunked (known before the body is read)

  // Case-insensitive; the first occurrence.
  std::optional<std::string_view> header(std::string_view name) const;
};

// One request and its reply. Thread-safe: every method may be called from any thread; the work is posted to
// the connection's strand. A reply is either respond() once, or begin_stream(), send()*, end_stream().
// After the client disconnects every call is a no-op.
class Exchange {
 public:
  virtual ~Exchange() = default;
  virtual const HttpRequest& request() const = 0;
  virtual void respond(int status, std::string body, std::string content_type,
                       std::vector<HttpHeader> headers = {}) = 0;
  virtual void begin_stream(int status, std::string content_type, std::vector<HttpHeader> headers = {}) = 0;
  virtual void send(std::string data) = 0;
  virtual void end_stream() = 0;
  // Called once, on the connection's strand, if the client goes away (or the connection is closed) before
  // the reply was completely written. Set it before handing the exchange to another thread.
  virtual void on_disconnect(std::function<void()> fn) = 0;
};

using ExchangePtr = std::shared_ptr<Exchange>;

// What a request's head decides before the body is read: go on, or reply at once (and never read the body).
struct HeadVerdict {
  int status = 0;  // 0: accept
  std::string body;
  std::string content_type = "application/json";
  std::vector<HttpHeader> headers;
};

struct ServerHandlers {
  // Called on an I/O thread with the head only (body empty). Optional.
  std::function<HeadVerdict(const HttpRequest&)> check_head;
  // Called on an I/O thread with the whole request. Must not block: hand long work to another thread.
  std::function<void(ExchangePtr)> handle;
  // The body of a reply the server writes itself (malformed request, 413, 503 when full, timeouts).
  std::function<std::string(int status, std::string_view message)> error_body;
};

// PEM files of the listener's certificate chain (the server's first) and private key. With them the server
// speaks TLS 1.2 or 1.3 only, HTTP/1.1 inside; a handshake must finish within request_timeout.
struct TlsFiles {
  std::filesystem::path cert;
  std::filesystem::path key;
};

class HttpServer {
 public:
  HttpServer(ServerLimits limits, ServerHandlers handlers, std::optional<TlsFiles> tls = std::nullopt);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and serves. Port 0 picks a free port. config_error for a bad host or unusable TLS files (naming
  // the file and OpenSSL's reason), io_error when it cannot bind.
  protocol::Result<uint16_t> start(const std::string& host, uint16_t port);
  // Closes the listening socket (on an I/O thread: ready when it is closed); connections already open are
  // served (their replies say Connection: close).
  std::future<void> stop_accepting();
  // Closes every connection and joins the I/O threads. Idempotent.
  void stop();

  size_t connections() const;
  uint16_t port() const;
  bool tls() const;
  // TLS handshakes that failed or timed out (plain HTTP to a TLS port, a client that rejects the
  // certificate, a scanner); each closed its connection.
  uint64_t tls_handshake_failures() const;

 private:
  std::shared_ptr<detail::ServerCore> impl_;  // connections share it: their sockets need its io_context
};

}  // namespace epd::http

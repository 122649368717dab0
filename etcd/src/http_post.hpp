#pragma once
// HTTP/1.1 POSTs with a JSON body to an etcd endpoint, bounded in time (Boost.Beast on a private io_context,
// so a call never blocks longer than its deadline whatever the server does): on kept-alive connections for
// the unary calls, on a connection of its own for a watch stream.
#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "epd/etcd/endpoint.hpp"
#include "epd/protocol/result.hpp"

namespace epd::etcd::detail {

struct HttpReply {
  unsigned status = 0;
  std::string body;
};

// One HTTP/1.1 connection to one endpoint, kept alive from call to call: a client that renews leases every
// second would otherwise make etcd accept (and the kernel set up and tear down) a connection per renewal.
// Each post() is bounded by its timeout. Not thread-safe: one caller at a time (HttpPool hands them out).
class HttpConnection {
 public:
  explicit HttpConnection(Endpoint ep);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Sends and reads the whole answer within `timeout`, connecting first when there is no open connection.
  // A kept connection the server closed while idle is noticed before sending, and a send that fails on a
  // kept connection is made once more on a fresh one (no answer had begun, as a new connection's would).
  protocol::Result<HttpReply> post(const std::string& target, const std::string& body,
                                   std::chrono::milliseconds timeout);
  // Connections opened so far (1 for a client whose every call reused the first).
  uint64_t connects() const { return connects_; }

 private:
  struct Io;
  protocol::Result<HttpReply> attempt(const std::string& target, const std::string& body,
                                      std::chrono::milliseconds timeout, bool* reused_and_unsent);
  const Endpoint ep_;
  std::unique_ptr<Io> io_;
  uint64_t connects_ = 0;
};

// Idle connections to one endpoint, for callers on any thread: take() hands out an idle one (or a new one),
// give_back() keeps at most `max_idle` of them.
class HttpPool {
 public:
  HttpPool(Endpoint ep, size_t max_idle) : ep_(std::move(ep)), max_idle_(max_idle) {}
  std::unique_ptr<HttpConnection> take();
  void give_back(std::unique_ptr<HttpConnection> c);

 private:
  const Endpoint ep_;
  const size_t max_idle_;
  std::mutex mu_;
  std::vector<std::unique_ptr<HttpConnection>> idle_;
};

// A one-off POST on its own connection: connect, send and read the whole answer within `timeout`.
protocol::Result<HttpReply> http_post(const Endpoint& ep, const std::string& target, const std::string& body,
                                      std::chrono::milliseconds timeout);

// How a streamed POST ended.
struct StreamEnd {
  enum class Why { stopped, closed, idle, failed };
  Why why = Why::failed;
  unsigned status = 0;
  std::string error;
};

// POSTs and hands each newline-separated line of the (chunked) answer to `on_line` as it arrives.
// Connecting and the response header are bounded by `timeout`; then the stream may stay open as long as
// bytes keep arriving at least every `idle_timeout`. `stop` is checked every 100 ms. `on_line` returns
// false to end the stream (Why::stopped).
StreamEnd http_post_stream(const Endpoint& ep, const std::string& target, const std::string& body,
                           std::chrono::milliseconds timeout, std::chrono::milliseconds idle_timeout,
                           const std::atomic<bool>& stop,
                           const std::function<bool(std::string_view)>& on_line);

}  // namespace epd::etcd::detail

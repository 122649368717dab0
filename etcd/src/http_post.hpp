#pragma once
// One HTTP/1.1 POST with a JSON body to an etcd endpoint, bounded in time (Boost.Beast on a private
// io_context, so a call never blocks longer than its deadline whatever the server does).
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <string_view>

#include "epd/etcd/endpoint.hpp"
#include "epd/protocol/result.hpp"

namespace epd::etcd::detail {

struct HttpReply {
  unsigned status = 0;
  std::string body;
};

// Connect, send and read the whole answer within `timeout`.
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

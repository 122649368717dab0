#pragma once
// A small asynchronous HTTP/1.1 client on one io_context (Boost.Beast): every exchange is a chain of
// callbacks, so thousands of concurrent streams cost sockets, not threads. Response bodies are handed
// over piece by piece as they arrive (an SSE stream is read while it is being written). Connections are
// kept alive and reused.
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace epd::bench {

// http://host:port[/prefix] split into its parts; nullopt-like: ok false with the reason in `error`.
struct Url {
  std::string host, port, prefix;  // prefix without a trailing '/'
  bool ok = false;
  std::string error;
};
Url parse_url(std::string_view url);

struct Exchange;

class AsyncHttp {
 public:
  struct Handlers {
    std::function<void(unsigned status, std::string_view request_id)> on_status;  // headers are in
    std::function<void(std::string_view bytes)> on_body;                          // each piece as it arrives
    std::function<void(const std::string& error)> on_done;  // "" = the whole response arrived
  };

  // `timeout` bounds each step: connect, write, and every read (the gap between two pieces).
  AsyncHttp(boost::asio::io_context& io, boost::asio::ip::tcp::endpoint endpoint, std::string host_header,
            std::chrono::milliseconds timeout);
  ~AsyncHttp();

  void request(std::string method, std::string target, std::string body,
               std::vector<std::pair<std::string, std::string>> headers, Handlers handlers);
  size_t connections_opened() const { return opened_; }

 private:
  friend struct Exchange;
  std::unique_ptr<boost::beast::tcp_stream> take_idle();
  void give_back(std::unique_ptr<boost::beast::tcp_stream> stream);

  boost::asio::io_context& io_;
  boost::asio::ip::tcp::endpoint endpoint_;
  std::string host_header_;
  std::chrono::milliseconds timeout_;
  std::vector<std::unique_ptr<boost::beast::tcp_stream>> idle_;
  size_t opened_ = 0;
};

// Resolves host:port once, before any load (blocking). Throws boost::system::system_error.
boost::asio::ip::tcp::endpoint resolve(boost::asio::io_context& io, const Url& url);

}  // namespace epd::bench

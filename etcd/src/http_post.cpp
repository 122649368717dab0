#include "http_post.hpp"

#include <poll.h>
#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <optional>

namespace epd::etcd::detail {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using protocol::ErrorCode;
using protocol::make_error;

http::request<http::string_body> make_request(const Endpoint& ep, const std::string& target,
                                              const std::string& body) {
  http::request<http::string_body> req{http::verb::post, target, 11};
  req.set(http::field::host, ep.host + ":" + std::to_string(ep.port));
  req.set(http::field::content_type, "application/json");
  req.body() = body;
  req.prepare_payload();
  return req;
}

// Runs the io_context until `done` or the stream's deadline fired (Beast cancels the pending operation).
void run_until(asio::io_context& ioc, const bool& done) {
  while (!done && !ioc.stopped()) ioc.run_one();
}

}  // namespace

struct HttpConnection::Io {
  asio::io_context ioc;
  std::optional<beast::tcp_stream> stream;  // open while kept
  beast::flat_buffer buf;

  void drop() {
    if (!stream) return;
    beast::error_code ignored;
    stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.reset();
    buf.clear();
  }
  // A kept connection is usable only while nothing is waiting on it: an idle HTTP server sends nothing,
  // so anything readable (its FIN, a reset, stray bytes) means the connection is done.
  bool still_open() {
    if (!stream) return false;
    pollfd p{stream->socket().native_handle(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }
};

HttpConnection::HttpConnection(Endpoint ep) : ep_(std::move(ep)), io_(std::make_unique<Io>()) {}

HttpConnection::~HttpConnection() {
  io_->drop();
}

protocol::Result<HttpReply> HttpConnection::post(const std::string& target, const std::string& body,
                                                 std::chrono::milliseconds timeout) {
  // Asio throws when it cannot even make its descriptors (EMFILE at thousands of connections): a failed
  // call like any other, which the caller retries, never an exception that ends its thread.
  try {
    bool reused_and_unsent = false;
    auto reply = attempt(target, body, timeout, &reused_and_unsent);
    if (!reply && reused_and_unsent) reply = attempt(target, body, timeout, &reused_and_unsent);
    return reply;
  } catch (const std::exception& e) {
    io_->drop();
    return make_error(ErrorCode::peer_unreachable, ep_.text() + ": " + e.what());
  }
}

protocol::Result<HttpReply> HttpConnection::attempt(const std::string& target, const std::string& body,
                                                    std::chrono::milliseconds timeout,
                                                    bool* reused_and_unsent) {
  Io& io = *io_;
  *reused_and_unsent = false;
  io.ioc.restart();
  beast::error_code ec;
  std::string failed_at;
  if (!io.still_open()) {
    io.drop();
    tcp::resolver resolver(io.ioc);
    auto addrs = resolver.resolve(ep_.host, std::to_string(ep_.port), ec);
    if (ec) return make_error(ErrorCode::peer_unreachable, ep_.text() + ": " + ec.message());
    io.stream.emplace(io.ioc);
    ++connects_;
    bool connected = false;
    io.stream->expires_after(timeout);
    io.stream->async_connect(addrs, [&](beast::error_code e, const tcp::endpoint&) {
      ec = e, failed_at = "connect", connected = true;
    });
    run_until(io.ioc, connected);
  } else {
    *reused_and_unsent = true;
  }
  auto req = make_request(ep_, target, body);
  http::response<http::string_body> res;
  if (!ec) {
    bool done = false;
    io.stream->expires_after(timeout);
    http::async_write(*io.stream, req, [&](beast::error_code e, size_t) {
      if (e) {
        ec = e, failed_at = "send", done = true;
        return;
      }
      *reused_and_unsent = false;  // the request is out: never send it twice
      http::async_read(*io.stream, io.buf, res,
                       [&](beast::error_code e2, size_t) { ec = e2, failed_at = "read", done = true; });
    });
    run_until(io.ioc, done);
  }
  if (ec) {
    io.drop();
    const bool timed_out = ec == beast::error::timeout;
    return make_error(
        timed_out ? ErrorCode::timeout : ErrorCode::peer_unreachable,
        ep_.text() + target + ": " + failed_at + ": " +
            (timed_out ? "no answer within " + std::to_string(timeout.count()) + " ms" : ec.message()));
  }
  *reused_and_unsent = false;
  if (!res.keep_alive()) io.drop();  // the server said it closes this connection
  return HttpReply{res.result_int(), std::move(res.body())};
}

std::unique_ptr<HttpConnection> HttpPool::take() {
  {
    std::lock_guard lock(mu_);
    if (!idle_.empty()) {
      auto c = std::move(idle_.back());
      idle_.pop_back();
      return c;
    }
  }
  return std::make_unique<HttpConnection>(ep_);
}

void HttpPool::give_back(std::unique_ptr<HttpConnection> c) {
  std::lock_guard lock(mu_);
  if (idle_.size() < max_idle_) idle_.push_back(std::move(c));
}

protocol::Result<HttpReply> http_post(const Endpoint& ep, const std::string& target, const std::string& body,
                                      std::chrono::milliseconds timeout) {
  return HttpConnection(ep).post(target, body, timeout);
}

namespace {
StreamEnd post_stream(const Endpoint& ep, const std::string& target, const std::string& body,
                      std::chrono::milliseconds timeout, std::chrono::milliseconds idle_timeout,
                      const std::atomic<bool>& stop, const std::function<bool(std::string_view)>& on_line) {
  asio::io_context ioc;
  beast::tcp_stream stream(ioc);
  beast::error_code ec;
  tcp::resolver resolver(ioc);
  auto addrs = resolver.resolve(ep.host, std::to_string(ep.port), ec);
  if (ec) return {StreamEnd::Why::failed, 0, ep.text() + ": " + ec.message()};
  auto req = make_request(ep, target, body);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(boost::none);
  std::string pending;  // bytes of a line not yet complete
  bool want_stop = false;
  auto on_chunk = [&](uint64_t, beast::string_view data, beast::error_code&) -> size_t {
    pending.append(data.data(), data.size());
    size_t start = 0;
    for (size_t nl; !want_stop && (nl = pending.find('\n', start)) != std::string::npos; start = nl + 1) {
      std::string_view line(pending.data() + start, nl - start);
      if (!line.empty() && !on_line(line)) want_stop = true;
    }
    pending.erase(0, start);
    return data.size();  // consumed: nothing accumulates in the parser's body
  };
  parser.on_chunk_body(on_chunk);

  bool done = false;
  std::string failed_at;
  stream.expires_after(timeout);
  stream.async_connect(addrs, [&](beast::error_code e, const tcp::endpoint&) {
    if (e) {
      ec = e, failed_at = "connect", done = true;
      return;
    }
    http::async_write(stream, req, [&](beast::error_code e2, size_t) {
      if (e2) {
        ec = e2, failed_at = "send", done = true;
        return;
      }
      http::async_read_header(stream, buf, parser, [&](beast::error_code e3, size_t) {
        ec = e3, failed_at = "read header", done = true;
      });
    });
  });
  run_until(ioc, done);
  auto close = [&] {
    beast::error_code ignored;
    stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream.close();
  };
  if (ec) {
    close();
    return {StreamEnd::Why::failed, 0, ep.text() + target + ": " + failed_at + ": " + ec.message()};
  }
  const unsigned status = parser.get().result_int();
  if (status != 200) {
    stream.expires_after(timeout);
    done = false;
    http::async_read(stream, buf, parser, [&](beast::error_code e, size_t) { ec = e, done = true; });
    run_until(ioc, done);
    close();
    return {StreamEnd::Why::failed, status,
            ep.text() + target + ": HTTP " + std::to_string(status) + " " + parser.get().body()};
  }
  // Body: one read at a time, each with the idle deadline; between slices of 100 ms we look at `stop`.
  for (;;) {
    if (parser.is_done()) {
      close();
      return {StreamEnd::Why::closed, status, "the server ended the stream"};
    }
    done = false;
    stream.expires_after(idle_timeout);
    http::async_read_some(stream, buf, parser, [&](beast::error_code e, size_t) { ec = e, done = true; });
    while (!done) {
      ioc.restart();
      ioc.run_for(std::chrono::milliseconds(100));
      if (!done && stop.load()) {
        stream.cancel();
        ioc.restart();
        ioc.run();  // the cancelled read completes
        close();
        return {StreamEnd::Why::stopped, status, ""};
      }
    }
    if (want_stop) {
      close();
      return {StreamEnd::Why::stopped, status, ""};
    }
    if (ec == beast::error::timeout) {
      close();
      return {StreamEnd::Why::idle, status,
              "nothing for " + std::to_string(idle_timeout.count()) + " ms from " + ep.text()};
    }
    if (ec == http::error::end_of_stream || ec == asio::error::eof) {
      close();
      return {StreamEnd::Why::closed, status, "the server closed the stream"};
    }
    if (ec) {
      close();
      return {StreamEnd::Why::failed, status, ep.text() + target + ": " + ec.message()};
    }
  }
}

}  // namespace

StreamEnd http_post_stream(const Endpoint& ep, const std::string& target, const std::string& body,
                           std::chrono::milliseconds timeout, std::chrono::milliseconds idle_timeout,
                           const std::atomic<bool>& stop,
                           const std::function<bool(std::string_view)>& on_line) {
  try {
    return post_stream(ep, target, body, timeout, idle_timeout, stop, on_line);
  } catch (const std::exception& e) {  // as in HttpConnection::post: a failure, not the thread's end
    return {StreamEnd::Why::failed, 0, ep.text() + target + ": " + e.what()};
  }
}

}  // namespace epd::etcd::detail

#include "async_http.hpp"

#include <boost/asio/connect.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <boost/optional.hpp>
#include <limits>

namespace epd::bench {

namespace beast = boost::beast;
namespace http = beast::http;
using boost::asio::ip::tcp;

Url parse_url(std::string_view url) {
  Url u;
  constexpr std::string_view scheme = "http://";
  if (url.substr(0, scheme.size()) != scheme) {
    u.error = "only http:// URLs are supported";
    return u;
  }
  url.remove_prefix(scheme.size());
  const size_t slash = url.find('/');
  const std::string_view authority = url.substr(0, slash);
  std::string_view prefix = slash == std::string_view::npos ? std::string_view{} : url.substr(slash);
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  const size_t colon = authority.rfind(':');
  u.host = std::string(authority.substr(0, colon));
  u.port = colon == std::string_view::npos ? "80" : std::string(authority.substr(colon + 1));
  u.prefix = std::string(prefix);
  u.ok = !u.host.empty() && !u.port.empty();
  if (!u.ok) u.error = "the URL has no host or port";
  return u;
}

tcp::endpoint resolve(boost::asio::io_context& io, const Url& url) {
  tcp::resolver resolver(io);
  return *resolver.resolve(url.host, url.port).begin();
}

// One request and its response. It keeps itself alive through the handlers it hands to Asio.
struct Exchange : std::enable_shared_from_this<Exchange> {
  AsyncHttp& owner;
  AsyncHttp::Handlers handlers;
  http::request<http::string_body> req;
  std::unique_ptr<beast::tcp_stream> stream;
  bool reused = false;  // a kept-alive connection: the server may have closed it meanwhile
  beast::flat_buffer buffer;
  boost::optional<http::response_parser<http::buffer_body>> parser;
  char piece[16384];

  Exchange(AsyncHttp& o, AsyncHttp::Handlers h) : owner(o), handlers(std::move(h)) {}

  void start() {
    stream = owner.take_idle();
    reused = stream != nullptr;
    if (reused) return write();
    connect();
  }

  void connect() {
    stream = std::make_unique<beast::tcp_stream>(owner.io_);
    ++owner.opened_;
    stream->expires_after(owner.timeout_);
    stream->async_connect(owner.endpoint_, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->fail("connect: " + ec.message());
      self->stream->socket().set_option(tcp::no_delay(true));  // no Nagle delay on small requests
      self->write();
    });
  }

  void write() {
    stream->expires_after(owner.timeout_);
    http::async_write(*stream, req, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->retry_or_fail("write: " + ec.message());
      self->read_header();
    });
  }

  void read_header() {
    parser.emplace();
    // A long stream is not an error. Not boost::none: Beast 1.74 compares a Content-Length with the
    // optional limit as `len > none`, true, and refuses every sized body.
    parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    stream->expires_after(owner.timeout_);
    http::async_read_header(
        *stream, buffer, *parser, [self = shared_from_this()](beast::error_code ec, size_t) {
          if (ec) return self->retry_or_fail("read: " + ec.message());
          const auto& msg = self->parser->get();
          const auto id = msg["X-Request-Id"];
          self->handlers.on_status(msg.result_int(), std::string_view(id.data(), id.size()));
          self->read_body();
        });
  }

  // One read at a time, not `async_read`: that would wait until `piece` is full, holding events back.
  void read_body() {
    if (parser->is_done()) return finish();
    parser->get().body().data = piece;
    parser->get().body().size = sizeof piece;
    stream->expires_after(owner.timeout_);
    http::async_read_some(*stream, buffer, *parser,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            const size_t n = sizeof self->piece - self->parser->get().body().size;
                            if (n) self->handlers.on_body(std::string_view(self->piece, n));
                            if (ec == http::error::need_buffer) ec = {};
                            if (ec) return self->fail("read: " + ec.message());
                            self->read_body();
                          });
  }

  void finish() {
    const bool keep = parser->get().keep_alive();
    if (keep) owner.give_back(std::move(stream));
    handlers.on_done("");
  }

  // A kept-alive connection the server closed before answering: once more on a fresh one.
  void retry_or_fail(const std::string& what) {
    if (!reused) return fail(what);
    buffer.clear();
    reused = false;
    connect();
  }

  void fail(const std::string& what) {
    beast::error_code ignored;
    if (stream) stream->socket().close(ignored);
    handlers.on_done(what);
  }
};

AsyncHttp::AsyncHttp(boost::asio::io_context& io, tcp::endpoint endpoint, std::string host_header,
                     std::chrono::milliseconds timeout)
    : io_(io), endpoint_(endpoint), host_header_(std::move(host_header)), timeout_(timeout) {}

AsyncHttp::~AsyncHttp() = default;

void AsyncHttp::request(std::string method, std::string target, std::string body,
                        std::vector<std::pair<std::string, std::string>> headers, Handlers handlers) {
  auto ex = std::make_shared<Exchange>(*this, std::move(handlers));
  ex->req.method_string(method);
  ex->req.target(target);
  ex->req.version(11);
  ex->req.set(http::field::host, host_header_);
  ex->req.set(http::field::user_agent, "epd-bench");
  for (auto& [k, v] : headers) ex->req.set(k, v);
  if (!body.empty() || method == "POST") {
    ex->req.set(http::field::content_type, "application/json");
    ex->req.body() = std::move(body);
    ex->req.prepare_payload();
  }
  ex->start();
}

std::unique_ptr<beast::tcp_stream> AsyncHttp::take_idle() {
  if (idle_.empty()) return nullptr;
  auto s = std::move(idle_.back());
  idle_.pop_back();
  return s;
}

void AsyncHttp::give_back(std::unique_ptr<beast::tcp_stream> stream) {
  stream->expires_never();
  idle_.push_back(std::move(stream));
}

}  // namespace epd::bench

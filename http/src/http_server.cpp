#include "epd/http/http_server.hpp"

#include <netdb.h>
#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <charconv>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include <spdlog/spdlog.h>

#include "tls_context.hpp"

namespace epd::http {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = beast::http;
using tcp = asio::ip::tcp;
using TlsStream = beast::ssl_stream<tcp::socket>;
using boost::system::error_code;
using protocol::ErrorCode;
using protocol::make_error;

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i])))
      return false;
  return true;
}

std::string reason_phrase(int status) {
  auto r = bhttp::obsolete_reason(static_cast<bhttp::status>(status));
  return r.empty() ? "Status" : std::string(r);
}

std::string hex(size_t n) {
  char buf[20];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), n, 16);
  return std::string(buf, p);
}

}  // namespace

std::optional<std::string_view> HttpRequest::header(std::string_view name) const {
  for (const auto& h : headers)
    if (iequals(h.name, name)) return std::string_view(h.value);
  return std::nullopt;
}

class Connection;
class ExchangeImpl;

namespace detail {
struct ServerCore : std::enable_shared_from_this<ServerCore> {
  ServerCore(ServerLimits l, ServerHandlers h, std::optional<TlsFiles> t)
      : limits(l), handlers(std::move(h)), tls_files(std::move(t)) {}

  const ServerLimits limits;
  const ServerHandlers handlers;
  const std::optional<TlsFiles> tls_files;
  std::shared_ptr<asio::ssl::context> tls;  // set by start() when tls_files are given
  std::atomic<uint64_t> handshake_failures{0};
  asio::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  // Keeps run() going while every connection waits for a reply from another thread (no I/O pending).
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  std::vector<std::thread> threads;
  // Large bodies are handled here, not on an I/O thread: parsing a 16 MiB JSON body and decoding its image
  // takes tens of ms, which would hold up every connection sharing that I/O thread.
  std::optional<asio::thread_pool> workers;
  std::atomic<bool> closing{false};  // stop_accepting() called: every reply closes its connection
  uint16_t port = 0;

  std::mutex conns_mu;
  std::map<uint64_t, std::weak_ptr<Connection>> conns;
  uint64_t next_conn = 1;

  // Posts from other threads stop once stop() has drained the queue (so no handler outlives the threads).
  std::mutex post_mu;
  bool stopped = false;

  template <class Executor, class Fn>
  void post(const Executor& ex, Fn&& fn) {
    std::lock_guard lock(post_mu);
    if (!stopped) asio::post(ex, std::forward<Fn>(fn));
  }

  std::string error_body(int status, std::string_view message) const {
    if (handlers.error_body) return handlers.error_body(status, message);
    return std::string(message);
  }

  void accept();
  void refuse(tcp::socket socket);
  size_t live_connections() {
    std::lock_guard lock(conns_mu);
    return conns.size();
  }
};
}  // namespace detail

// One client connection, plain TCP or TLS: the same code reads and writes either stream (with_stream).
// Lives on its strand: every member below is touched only there.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(std::shared_ptr<detail::ServerCore> srv, uint64_t id, tcp::socket socket)
      : srv_(std::move(srv)), id_(id), timer_(socket.get_executor()) {
    error_code ec;
    auto ep = socket.remote_endpoint(ec);
    remote_ = ec ? "?" : ep.address().to_string() + ":" + std::to_string(ep.port());
    if (srv_->tls)
      tls_.emplace(std::move(socket), *srv_->tls);
    else
      plain_.emplace(std::move(socket));
  }

  void start() {
    if (!tls_) return read_request();
    // The handshake counts against the request timeout: a client that connects and stalls is dropped.
    arm(srv_->limits.request_timeout);
    tls_->async_handshake(asio::ssl::stream_base::server,
                          [self = shared_from_this()](error_code ec) { self->on_handshake(ec); });
  }
  asio::any_io_executor executor() { return socket().get_executor(); }

  // From any thread.
  template <class Fn>
  void post(Fn&& fn) {
    srv_->post(socket().get_executor(), std::forward<Fn>(fn));
  }

  // Strand only.
  void close() {
    if (closed_) return;
    closed_ = true;
    ++timer_gen_;
    timer_.cancel();
    error_code ec;
    socket().shutdown(tcp::socket::shutdown_both, ec);
    socket().close(ec);
    {
      std::lock_guard lock(srv_->conns_mu);
      srv_->conns.erase(id_);
    }
    fire_disconnect();
  }

  // ---- used by ExchangeImpl (strand only) ----
  bool closed() const { return closed_; }
  bool keep_alive() const { return keep_alive_ && !srv_->closing; }
  void write(std::string data) {
    if (closed_) return;
    out_bytes_ += data.size();
    if (out_bytes_ > srv_->limits.max_pending_output) {
      spdlog::warn("http: {} reads slower than its reply is produced ({} bytes queued); closing", remote_,
                   out_bytes_);
      return close();
    }
    out_.push_back(std::move(data));
    if (!writing_) write_next();
  }
  // The current exchange's reply is complete once the queued bytes are written.
  void finish_exchange() {
    exchange_done_ = true;
    if (!writing_) exchange_finished();
  }
  void set_disconnect(std::function<void()> fn) { on_disconnect_ = std::move(fn); }

 private:
  // The TCP socket (under TLS, the one the TLS stream runs over): for shutdown, close, cancel.
  tcp::socket& socket() { return tls_ ? beast::get_lowest_layer(*tls_) : *plain_; }
  template <class Fn>
  void with_stream(Fn&& fn) {
    if (tls_)
      fn(*tls_);
    else
      fn(*plain_);
  }

  void on_handshake(error_code ec) {
    if (ec) {
      // Plain HTTP to the TLS port, a client that rejects the certificate, a scanner, or the timeout.
      ++srv_->handshake_failures;
      spdlog::debug("http: TLS handshake with {} failed: {}", remote_, ec.message());
      return close();
    }
    if (!closed_) read_request();
  }

  void arm(std::chrono::milliseconds d) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(d);
    timer_.async_wait([self = shared_from_this(), gen, d](error_code ec) {
      if (ec || gen != self->timer_gen_ || self->closed_) return;
      // A request begun and not finished in time gets a 408 (its read is cancelled first); an idle
      // connection or a stalled reader is simply closed.
      if (self->reading_ && (self->parser_->got_some() || self->buffer_.size() > 0)) {
        self->timed_out_after_ = d;
        error_code ignored;
        self->socket().cancel(ignored);
        return;
      }
      spdlog::debug("http: {} timed out; closing", self->remote_);
      self->close();
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  void fire_disconnect() {
    auto fn = std::move(on_disconnect_);
    on_disconnect_ = nullptr;
    if (fn && !exchange_done_) fn();
  }

  void read_request() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(srv_->limits.max_header_bytes));
    parser_->body_limit(srv_->limits.max_body_bytes);
    arm(served_ == 0 ? srv_->limits.request_timeout : srv_->limits.idle_timeout);
    reading_ = true;
    with_stream([&](auto& s) {
      bhttp::async_read_header(s, buffer_, *parser_,
                               [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
    });
  }

  // A reply the server writes itself; the connection closes afterwards.
  void reply_and_close(int status, std::string_view message) {
    std::string body = srv_->error_body(status, message);
    std::string head =
        "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\nConnection: close\r\n\r\n";
    keep_alive_ = false;
    exchange_done_ = false;
    write(head + body);
    finish_exchange();
  }

  void on_read_error(error_code ec, bool header) {
    reading_ = false;
    if (closed_) return;
    if (timed_out_after_) {
      auto d = *timed_out_after_;
      timed_out_after_.reset();
      return reply_and_close(408, "request timed out: its " + std::string(header ? "head" : "body") +
                                      " did not arrive within " + std::to_string(d.count()) + " ms");
    }
    if (ec == bhttp::error::body_limit)
      return reply_and_close(
          413, "request body exceeds the limit of " + std::to_string(srv_->limits.max_body_bytes) + " bytes");
    if (ec == bhttp::error::header_limit)
      return reply_and_close(431, "request head exceeds the limit of " +
                                      std::to_string(srv_->limits.max_header_bytes) + " bytes");
    // The client went away (cleanly or mid-message) or the read timed out (close() already ran).
    // A TLS client that closes without close_notify reads as stream_truncated: still just gone.
    if (ec == bhttp::error::end_of_stream || ec == bhttp::error::partial_message || ec == asio::error::eof ||
        ec == asio::error::connection_reset || ec == asio::error::operation_aborted ||
        ec == asio::ssl::error::stream_truncated)
      return close();
    if (ec.category() == bhttp::make_error_code(bhttp::error::bad_target).category() ||
        ec == bhttp::error::bad_chunk)
      return reply_and_close(
          400, std::string("malformed HTTP ") + (header ? "request: " : "body: ") + ec.message());
    close();
  }

  void on_header(error_code ec) {
    if (ec) return on_read_error(ec, true);
    reading_ = false;
    auto& msg = parser_->get();
    request_ = HttpRequest{};
    request_.method = std::string(msg.method_string());
    request_.target = std::string(msg.target());
    request_.path = request_.target.substr(0, request_.target.find('?'));
    for (const auto& f : msg)
      request_.headers.push_back({std::string(f.name_string()), std::string(f.value())});
    request_.remote = remote_;
    request_.has_body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
    keep_alive_ = msg.keep_alive();

    if (srv_->handlers.check_head) {
      HeadVerdict v = srv_->handlers.check_head(request_);
      if (v.status != 0) {
        // The body (if any) is never read, so the connection cannot carry another request.
        if (request_.has_body) keep_alive_ = false;
        exchange_done_ = false;
        write_reply(v.status, std::move(v.body), v.content_type, v.headers, false);
        return finish_exchange();
      }
    }
    if (parser_->is_done()) return dispatch();
    arm(srv_->limits.request_timeout);
    auto expect = request_.header("Expect");
    if (expect && iequals(*expect, "100-continue")) {
      writing_ = true;
      auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
      with_stream([&](auto& s) {
        asio::async_write(s, asio::buffer(*cont), [self = shared_from_this(), cont](error_code ec, size_t) {
          self->writing_ = false;
          if (ec) return self->close();
          self->read_body();
        });
      });
      return;
    }
    read_body();
  }

  void read_body() {
    reading_ = true;
    with_stream([&](auto& s) {
      bhttp::async_read(s, buffer_, *parser_, [self = shared_from_this()](error_code ec, size_t) {
        if (ec) return self->on_read_error(ec, false);
        self->reading_ = false;
        self->dispatch();
      });
    });
  }

  void dispatch();

  // While a request is being answered, keep a read posted: it sees the client hang up (EOF or reset) at
  // once, which cancels the work. Bytes a client pipelines meanwhile are kept for the next request.
  auto on_watch() {
    return [self = shared_from_this()](error_code ec, size_t n) {
      self->watching_ = false;
      if (self->closed_) return;
      if (ec == asio::error::operation_aborted && self->resume_after_watch_) {
        self->resume_after_watch_ = false;
        return self->read_request();
      }
      if (ec) {
        if (!self->lingering_)
          spdlog::debug("http: {} disconnected while its request was being answered", self->remote_);
        return self->close();
      }
      self->buffer_.commit(n);
      if (self->lingering_) self->buffer_.consume(self->buffer_.size());
      if (self->resume_after_watch_) {
        self->resume_after_watch_ = false;
        return self->read_request();
      }
      self->watch();
    };
  }

  void watch() {
    if (closed_ || watching_ || (!lingering_ && buffer_.size() >= srv_->limits.max_header_bytes)) return;
    watching_ = true;
    with_stream([&](auto& s) { s.async_read_some(buffer_.prepare(4096), on_watch()); });
  }

  auto on_written() {
    return [self = shared_from_this()](error_code ec, size_t) {
      self->writing_ = false;
      if (self->closed_) return;
      self->disarm();
      if (ec) {
        spdlog::debug("http: write to {} failed: {}", self->remote_, ec.message());
        return self->close();
      }
      self->out_bytes_ -= self->out_.front().size();
      self->out_.pop_front();
      if (!self->out_.empty()) return self->write_next();
      if (self->exchange_done_) self->exchange_finished();
    };
  }

  void write_next() {
    writing_ = true;
    arm(srv_->limits.write_timeout);
    with_stream([&](auto& s) { asio::async_write(s, asio::buffer(out_.front()), on_written()); });
  }

  void exchange_finished() {
    exchange_done_ = false;
    on_disconnect_ = nullptr;
    ++served_;
    if (!keep_alive() || served_ >= srv_->limits.max_requests_per_connection) {
      // Lingering close: closing with unread input (a refused body still arriving) would send a reset that
      // can destroy the reply in the client's buffers. Say we are done, discard what still comes until the
      // client closes too, for at most a second. Under TLS no close_notify is sent (it would need a write
      // racing the discarding read); every reply is delimited by its length or its last chunk anyway.
      error_code ec;
      socket().shutdown(tcp::socket::shutdown_send, ec);
      lingering_ = true;
      resume_after_watch_ = false;
      arm(std::chrono::milliseconds(1000));
      return watch();
    }
    if (watching_) {
      resume_after_watch_ = true;
      error_code ec;
      socket().cancel(ec);  // the watch's handler then reads the next request
      return;
    }
    read_request();
  }

 public:
  void write_reply(int status, std::string body, const std::string& content_type,
                   const std::vector<HttpHeader>& headers, bool stream) {
    std::string head = "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) + "\r\n";
    head += "Content-Type: " + content_type + "\r\n";
    if (stream)
      head += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\n";
    else
      head += "Content-Length: " + std::to_string(body.size()) + "\r\n";
    for (const auto& h : headers) head += h.name + ": " + h.value + "\r\n";
    if (!keep_alive()) head += "Connection: close\r\n";
    head += "\r\n";
    if (!stream && request_.method != "HEAD") head += body;
    write(std::move(head));
  }

  const HttpRequest& request() const { return request_; }
  HttpRequest take_request() { return std::move(request_); }

 private:
  std::shared_ptr<detail::ServerCore> srv_;
  const uint64_t id_;
  asio::steady_timer timer_;
  std::optional<tcp::socket> plain_;  // exactly one of plain_ and tls_ is set
  std::optional<TlsStream> tls_;
  uint64_t timer_gen_ = 0;
  std::string remote_;
  beast::flat_buffer buffer_;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  HttpRequest request_;
  bool keep_alive_ = true;
  size_t served_ = 0;
  bool closed_ = false;
  bool reading_ = false;  // a request's head or body is being read
  std::optional<std::chrono::milliseconds> timed_out_after_;
  bool watching_ = false;
  bool resume_after_watch_ = false;
  bool lingering_ = false;  // the reply is out and the connection closes: input is discarded
  bool writing_ = false;
  bool exchange_done_ = false;
  std::deque<std::string> out_;
  size_t out_bytes_ = 0;
  std::function<void()> on_disconnect_;
};

class ExchangeImpl final : public Exchange, public std::enable_shared_from_this<ExchangeImpl> {
 public:
  ExchangeImpl(std::shared_ptr<Connection> conn, HttpRequest request)
      : conn_(std::move(conn)), request_(std::move(request)) {}

  // A handler that drops an exchange unanswered must not leave its client waiting forever.
  ~ExchangeImpl() override {
    if (state_ != State::open) return;
    conn_->post([conn = conn_] {
      if (conn->closed()) return;
      conn->write_reply(
          500,
          R"({"error":{"message":"the request was dropped unanswered","type":"server_error","param":null,"code":"internal"}})",
          "application/json", {}, false);
      conn->finish_exchange();
    });
  }

  const HttpRequest& request() const override { return request_; }

  void respond(int status, std::string body, std::string content_type,
               std::vector<HttpHeader> headers) override {
    if (!transition(State::open, State::done)) return;
    conn_->post([conn = conn_, status, body = std::move(body), ct = std::move(content_type),
                 headers = std::move(headers)]() mutable {
      if (conn->closed()) return;
      conn->write_reply(status, std::move(body), ct, headers, false);
      conn->finish_exchange();
    });
  }

  void begin_stream(int status, std::string content_type, std::vector<HttpHeader> headers) override {
    if (!transition(State::open, State::streaming)) return;
    conn_->post([conn = conn_, status, ct = std::move(content_type), headers = std::move(headers)] {
      if (conn->closed()) return;
      conn->write_reply(status, {}, ct, headers, true);
    });
  }

  void send(std::string data) override {
    if (data.empty() || state() != State::streaming) return;
    conn_->post([conn = conn_, data = std::move(data)]() mutable {
      if (conn->closed()) return;
      conn->write(hex(data.size()) + "\r\n" + data + "\r\n");
    });
  }

  void end_stream() override {
    if (!transition(State::streaming, State::done)) return;
    conn_->post([conn = conn_] {
      if (conn->closed()) return;
      conn->write("0\r\n\r\n");
      conn->finish_exchange();
    });
  }

  void on_disconnect(std::function<void()> fn) override {
    // Runs inline when called on the strand (the usual case: from the route handler).
    asio::dispatch(conn_->executor(), [conn = conn_, fn = std::move(fn)]() mutable {
      if (conn->closed()) return fn();
      conn->set_disconnect(std::move(fn));
    });
  }

 private:
  enum class State { open, streaming, done };
  State state() const {
    std::lock_guard lock(mu_);
    return state_;
  }
  bool transition(State from, State to) {
    std::lock_guard lock(mu_);
    if (state_ != from) return false;
    state_ = to;
    return true;
  }

  std::shared_ptr<Connection> conn_;
  HttpRequest request_;
  mutable std::mutex mu_;
  State state_ = State::open;
};

void Connection::dispatch() {
  disarm();
  auto& msg = parser_->get();
  request_.body = std::move(msg.body());
  auto ex = std::make_shared<ExchangeImpl>(shared_from_this(), std::move(request_));
  request_ = HttpRequest{};
  request_.method = ex->request().method;  // write_reply needs to know HEAD
  exchange_done_ = false;
  watch();
  auto run = [srv = srv_, ex] {
    try {
      srv->handlers.handle(ex);
    } catch (const std::exception& e) {
      spdlog::error("http: {} {} failed: {}", ex->request().method, ex->request().path.substr(0, 200),
                    e.what());
      ex->respond(500, srv->error_body(500, std::string("internal error: ") + e.what()), "application/json",
                  {});
    }
  };
  if (ex->request().body.size() > srv_->limits.inline_body_bytes)
    asio::post(*srv_->workers, std::move(run));
  else
    run();
}

void detail::ServerCore::refuse(tcp::socket socket) {
  auto s = std::make_shared<tcp::socket>(std::move(socket));
  if (tls) {  // a plain-text 503 means nothing to a TLS client, and a handshake costs what we lack
    error_code ec;
    s->close(ec);
    return;
  }
  auto body = std::make_shared<std::string>(error_body(503, "the server has too many connections open"));
  auto msg = std::make_shared<std::string>(
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json"
      "\r\nRetry-After: 1\r\nConnection: close\r\nContent-Length: " +
      std::to_string(body->size()) + "\r\n\r\n" + *body);
  asio::async_write(*s, asio::buffer(*msg), [s, msg, body](error_code, size_t) {
    error_code ec;
    s->shutdown(tcp::socket::shutdown_both, ec);
    s->close(ec);
  });
}

void detail::ServerCore::accept() {
  acceptor->async_accept(
      asio::make_strand(ioc), [self = shared_from_this()](error_code ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !self->acceptor || !self->acceptor->is_open()) return;
        if (!ec) {
          error_code ignored;
          socket.set_option(tcp::no_delay(true), ignored);  // SSE events are small; never hold one back
          if (self->live_connections() >= self->limits.max_connections) {
            spdlog::warn("http: {} connections open (the limit); refusing a new one",
                         self->limits.max_connections);
            self->refuse(std::move(socket));
          } else {
            std::shared_ptr<Connection> conn;
            {
              std::lock_guard lock(self->conns_mu);
              const uint64_t id = self->next_conn++;
              conn = std::make_shared<Connection>(self, id, std::move(socket));
              self->conns.emplace(id, conn);
            }
            asio::dispatch(conn->executor(), [conn] { conn->start(); });
          }
        } else {
          spdlog::warn("http: accept failed: {}", ec.message());
        }
        self->accept();
      });
}

HttpServer::HttpServer(ServerLimits limits, ServerHandlers handlers, std::optional<TlsFiles> tls)
    : impl_(std::make_shared<detail::ServerCore>(limits, std::move(handlers), std::move(tls))) {}

HttpServer::~HttpServer() {
  stop();
}

size_t HttpServer::connections() const {
  return impl_ ? impl_->live_connections() : 0;
}

uint16_t HttpServer::port() const {
  return impl_ ? impl_->port : 0;
}

bool HttpServer::tls() const {
  return impl_ && impl_->tls_files.has_value();
}

uint64_t HttpServer::tls_handshake_failures() const {
  return impl_ ? impl_->handshake_failures.load() : 0;
}

protocol::Result<uint16_t> HttpServer::start(const std::string& host, uint16_t port) {
  if (impl_->acceptor) return make_error(ErrorCode::config_error, "http: already listening");
  if (impl_->limits.io_threads == 0 || impl_->limits.work_threads == 0)
    return make_error(ErrorCode::config_error, "http: io_threads and work_threads must be at least 1");
  if (impl_->tls_files && !impl_->tls) {
    auto ctx = make_tls_context(*impl_->tls_files);
    if (!ctx) return ctx.error();
    impl_->tls = *ctx;
  }
  error_code ec;
  tcp::resolver resolver(impl_->ioc);
  auto results = resolver.resolve(host, std::to_string(port), tcp::resolver::passive, ec);
  if (ec || results.empty())
    return make_error(ErrorCode::config_error, "http: cannot resolve host '" + host + "': " + ec.message());
  const tcp::endpoint ep = results.begin()->endpoint();
  const std::string where = host + ":" + std::to_string(port);
  tcp::acceptor acc(impl_->ioc);
  acc.open(ep.protocol(), ec);
  // SO_REUSEADDR for quick restarts over TIME_WAIT; never SO_REUSEPORT, which would let a second router
  // silently share a busy port.
  if (!ec) acc.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) acc.bind(ep, ec);
  if (ec == asio::error::address_in_use)
    return make_error(ErrorCode::io_error, "http: " + where + " is already in use");
  if (!ec) acc.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return make_error(ErrorCode::io_error, "http: cannot listen on " + where + ": " + ec.message());
  impl_->port = acc.local_endpoint().port();
  impl_->acceptor.emplace(std::move(acc));
  impl_->accept();
  impl_->work.emplace(impl_->ioc.get_executor());
  impl_->workers.emplace(impl_->limits.work_threads);
  for (unsigned i = 0; i < impl_->limits.io_threads; ++i)
    impl_->threads.emplace_back([impl = impl_] { impl->ioc.run(); });
  return impl_->port;
}

std::future<void> HttpServer::stop_accepting() {
  impl_->closing = true;
  auto closed = std::make_shared<std::promise<void>>();
  auto done = closed->get_future();
  asio::post(impl_->ioc, [impl = impl_, closed] {
    error_code ec;
    if (impl->acceptor) impl->acceptor->close(ec);
    closed->set_value();
  });
  return done;
}

void HttpServer::stop() {
  if (!impl_ || impl_->threads.empty()) return;
  stop_accepting();
  std::vector<std::shared_ptr<Connection>> open;
  {
    std::lock_guard lock(impl_->conns_mu);
    for (auto& [id, weak] : impl_->conns)
      if (auto c = weak.lock()) open.push_back(std::move(c));
  }
  for (auto& c : open) c->post([c] { c->close(); });
  open.clear();
  impl_->work.reset();
  impl_->workers->join();  // a handler still parsing finishes (its reply goes nowhere)
  // Every connection is closed and the acceptor too: run() returns once their handlers have run.
  for (auto& t : impl_->threads) t.join();
  impl_->threads.clear();
  {
    std::lock_guard lock(impl_->post_mu);
    impl_->stopped = true;
  }
  // Handlers posted between the last run() and `stopped` still hold connections: run them (they no-op).
  impl_->ioc.restart();
  while (impl_->ioc.poll() > 0) {
  }
  impl_->acceptor.reset();
}

}  // namespace epd::http

#include "epd/etcd/lease_stream.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "grpc_frames.hpp"

namespace epd::etcd {

using protocol::ErrorCode;
using protocol::make_error;
using clock = std::chrono::steady_clock;

namespace {

int remaining_ms(clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock::now()).count();
  return left > 0 ? int(left) : 0;
}

// A TCP connection to `ep`, made within the deadline; -1 and `why` when it could not be.
int connect_to(const Endpoint& ep, clock::time_point deadline, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (int rc = getaddrinfo(ep.host.c_str(), std::to_string(ep.port).c_str(), &hints, &found); rc != 0) {
    why = gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int err = connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const int ready = poll(&p, 1, remaining_ms(deadline));
      socklen_t len = sizeof err;
      if (ready == 0)
        err = ETIMEDOUT;
      else if (ready < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
        err = errno;
    }
    if (err != 0) {
      why = std::strerror(err);
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd >= 0) {
    const int one = 1;  // a renewal is one small frame: do not hold it back for more
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

}  // namespace

struct LeaseStream::Impl {
  std::vector<Endpoint> endpoints;
  std::chrono::milliseconds timeout;
  std::shared_ptr<Traffic> traffic;
  size_t current = 0;  // the endpoint used last
  uint64_t opened = 0;

  // The open stream, if any.
  int fd = -1;
  nghttp2_session* session = nullptr;
  int32_t stream_id = -1;
  std::string to_send;   // gRPC messages not yet taken by the session
  std::string received;  // the stream's DATA, not yet parsed into messages
  bool stream_closed = false;
  std::string grpc_status, grpc_message;  // from the trailers (or a trailers-only answer)

  ~Impl() { drop(); }

  void drop() {
    if (session) nghttp2_session_del(session);
    session = nullptr;
    if (fd >= 0) close(fd);
    fd = -1;
    stream_id = -1;
    to_send.clear();
    received.clear();
    stream_closed = false;
    grpc_status.clear();
    grpc_message.clear();
  }

  // The request's body: whatever messages are waiting; the stream never ends from our side.
  static ssize_t read_body(nghttp2_session*, int32_t, uint8_t* buf, size_t length, uint32_t*,
                           nghttp2_data_source*, void* user) {
    auto* self = static_cast<Impl*>(user);
    if (self->to_send.empty()) return NGHTTP2_ERR_DEFERRED;
    const size_t n = std::min(length, self->to_send.size());
    std::memcpy(buf, self->to_send.data(), n);
    self->to_send.erase(0, n);
    return ssize_t(n);
  }
  static int on_data(nghttp2_session*, uint8_t, int32_t stream, const uint8_t* data, size_t len, void* user) {
    auto* self = static_cast<Impl*>(user);
    if (stream == self->stream_id) self->received.append(reinterpret_cast<const char*>(data), len);
    return 0;
  }
  static int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t namelen,
                       const uint8_t* value, size_t valuelen, uint8_t, void* user) {
    auto* self = static_cast<Impl*>(user);
    if (frame->hd.stream_id != self->stream_id) return 0;
    const std::string_view n(reinterpret_cast<const char*>(name), namelen);
    const std::string v(reinterpret_cast<const char*>(value), valuelen);
    if (n == "grpc-status") self->grpc_status = v;
    if (n == "grpc-message") self->grpc_message = v;
    return 0;
  }
  static int on_close(nghttp2_session*, int32_t stream, uint32_t, void* user) {
    auto* self = static_cast<Impl*>(user);
    if (stream == self->stream_id) self->stream_closed = true;
    return 0;
  }

  // Hands the session's pending output to the socket, all of it, within the deadline.
  protocol::Status flush(clock::time_point deadline) {
    while (nghttp2_session_want_write(session)) {
      const uint8_t* data = nullptr;
      const ssize_t n = nghttp2_session_mem_send(session, &data);
      if (n < 0) return make_error(ErrorCode::io_error, std::string("HTTP/2: ") + nghttp2_strerror(int(n)));
      if (n == 0) break;
      for (ssize_t off = 0; off < n;) {
        const ssize_t w = send(fd, data + off, size_t(n - off), MSG_NOSIGNAL);
        if (w > 0) {
          off += w;
          continue;
        }
        if (w < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
          return make_error(ErrorCode::io_error, std::string("send: ") + std::strerror(errno));
        pollfd p{fd, POLLOUT, 0};
        if (poll(&p, 1, remaining_ms(deadline)) == 0)
          return make_error(ErrorCode::timeout, "etcd took no more bytes in time");
      }
    }
    return {};
  }

  // Reads what has arrived (waiting up to the deadline for something) and feeds it to the session.
  protocol::Status pump(clock::time_point deadline) {
    pollfd p{fd, POLLIN, 0};
    const int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc == 0) return make_error(ErrorCode::timeout, "no answer in time");
    if (rc < 0 && errno != EINTR)
      return make_error(ErrorCode::io_error, std::string("poll: ") + std::strerror(errno));
    uint8_t buf[16384];
    const ssize_t r = recv(fd, buf, sizeof buf, 0);
    if (r == 0) return make_error(ErrorCode::io_error, "etcd closed the connection");
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return {};
      return make_error(ErrorCode::io_error, std::string("recv: ") + std::strerror(errno));
    }
    // What does not parse as HTTP/2 (an HTTP/1.1-only server or proxy answers our preface with a status
    // line) ends the session: etcd's gRPC is not there, which retrying will not change.
    const ssize_t used = nghttp2_session_mem_recv(session, buf, size_t(r));
    if (used < 0)
      return make_error(ErrorCode::malformed_body, std::string("not HTTP/2: ") + nghttp2_strerror(int(used)));
    if (!nghttp2_session_want_read(session) && !nghttp2_session_want_write(session))
      return make_error(ErrorCode::malformed_body, "not HTTP/2: the session ended on what the server sent");
    return {};
  }

  // A connection, an HTTP/2 session and the LeaseKeepAlive stream on it, on the first endpoint that
  // accepts, starting from the one used last.
  protocol::Status open(clock::time_point deadline) {
    std::string errors;
    for (size_t tried = 0; tried < endpoints.size() && fd < 0; ++tried) {
      const size_t idx = (current + tried) % endpoints.size();
      std::string why;
      fd = connect_to(endpoints[idx], deadline, why);
      if (fd < 0) {
        errors += (errors.empty() ? "" : "; ") + endpoints[idx].text() + ": " + why;
        continue;
      }
      current = idx;
    }
    if (fd < 0) return make_error(ErrorCode::peer_unreachable, "no etcd endpoint accepted: " + errors);
    nghttp2_session_callbacks* cb = nullptr;
    nghttp2_session_callbacks_new(&cb);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_close);
    const int rc = nghttp2_session_client_new(&session, cb, this);
    nghttp2_session_callbacks_del(cb);
    if (rc != 0) {
      drop();
      return make_error(ErrorCode::internal, std::string("HTTP/2 session: ") + nghttp2_strerror(rc));
    }
    nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
    const Endpoint& ep = endpoints[current];
    const std::string authority = ep.host + ":" + std::to_string(ep.port);
    auto nv = [](const char* name, const std::string& value) {
      return nghttp2_nv{reinterpret_cast<uint8_t*>(const_cast<char*>(name)),
                        reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), std::strlen(name),
                        value.size(), NGHTTP2_NV_FLAG_NONE};
    };
    const std::string post = "POST", scheme = "http", path = std::string(detail::kLeaseKeepAlivePath),
                      grpc = "application/grpc", trailers = "trailers";
    const nghttp2_nv headers[] = {nv(":method", post),         nv(":scheme", scheme),    nv(":path", path),
                                  nv(":authority", authority), nv("content-type", grpc), nv("te", trailers)};
    nghttp2_data_provider body{};
    body.read_callback = read_body;
    stream_id = nghttp2_submit_request(session, nullptr, headers, std::size(headers), &body, nullptr);
    if (stream_id < 0) {
      const int err = stream_id;
      drop();
      return make_error(ErrorCode::internal, std::string("HTTP/2 request: ") + nghttp2_strerror(err));
    }
    ++opened;
    if (traffic) traffic->connections.fetch_add(1, std::memory_order_relaxed);
    return flush(deadline);
  }

  // One renewal per lease, all sent at once; etcd answers them in order on the stream.
  Result<std::vector<int64_t>> renew(const std::vector<int64_t>& leases, clock::time_point deadline) {
    if (!session)
      if (auto st = open(deadline); !st) return st.error();
    // Every answer is read before the call returns (a failed call closes the stream): what is here
    // already, no renewal asked for, and it cannot be left to pile up.
    if (!received.empty())
      return make_error(ErrorCode::malformed_body,
                        std::to_string(received.size()) + " bytes on the stream that no renewal asked for");
    for (int64_t lease : leases) to_send += detail::grpc_message(detail::encode_keep_alive_request(lease));
    nghttp2_session_resume_data(session, stream_id);
    if (auto st = flush(deadline); !st) return st.error();
    std::vector<int64_t> ttls;
    ttls.reserve(leases.size());
    while (ttls.size() < leases.size()) {
      if (auto msg = detail::take_grpc_message(received)) {
        if (!*msg) return msg->error();
        auto answer = detail::decode_keep_alive_response(**msg);
        if (!answer) return answer.error();
        const int64_t asked = leases[ttls.size()];
        if (answer->id != 0 && answer->id != asked)
          return make_error(ErrorCode::malformed_body, "etcd renewed lease " + std::to_string(answer->id) +
                                                           " when asked for " + std::to_string(asked));
        if (traffic) {
          traffic->calls.fetch_add(1, std::memory_order_relaxed);
          traffic->call_bytes.fetch_add((**msg).size(), std::memory_order_relaxed);
        }
        ttls.push_back(answer->ttl);
        continue;
      }
      if (stream_closed && grpc_status.empty())  // reset, or a GOAWAY: etcd is going away
        return make_error(ErrorCode::io_error, "etcd closed the keep-alive stream");
      if (stream_closed)
        return make_error(ErrorCode::invalid_request, "etcd ended the keep-alive stream: grpc-status " +
                                                          grpc_status +
                                                          (grpc_message.empty() ? "" : " " + grpc_message));
      if (auto st = pump(deadline); !st) return st.error();
      if (auto st = flush(deadline); !st) return st.error();  // SETTINGS acks, window updates, pings
    }
    return ttls;
  }
};

LeaseStream::LeaseStream(std::vector<Endpoint> endpoints, std::chrono::milliseconds timeout,
                         std::shared_ptr<Traffic> traffic)
    : impl_(std::make_unique<Impl>()) {
  impl_->endpoints = std::move(endpoints);
  impl_->timeout = timeout;
  impl_->traffic = std::move(traffic);
}
LeaseStream::~LeaseStream() = default;
LeaseStream::LeaseStream(LeaseStream&&) noexcept = default;
LeaseStream& LeaseStream::operator=(LeaseStream&&) noexcept = default;

Result<int64_t> LeaseStream::keep_alive(int64_t lease) {
  auto ttls = keep_alive(std::vector<int64_t>{lease});
  if (!ttls) return ttls.error();
  return ttls->front();
}

Result<std::vector<int64_t>> LeaseStream::keep_alive(const std::vector<int64_t>& leases) {
  if (impl_->endpoints.empty()) return make_error(ErrorCode::config_error, "no etcd endpoints");
  if (leases.empty()) return std::vector<int64_t>{};
  auto r = impl_->renew(leases, clock::now() + impl_->timeout);
  if (!r) {
    // Whatever broke, the stream's state is unknown: a new one next time, on the next endpoint.
    const bool was_open = impl_->session != nullptr;
    const std::string where = was_open ? " to " + impl_->endpoints[impl_->current].text() : "";
    impl_->drop();
    if (was_open) impl_->current = (impl_->current + 1) % impl_->endpoints.size();
    return make_error(r.error().code, "etcd keep-alive stream" + where + ": " + r.error().detail);
  }
  return r;
}

uint64_t LeaseStream::opened() const {
  return impl_->opened;
}

}  // namespace epd::etcd

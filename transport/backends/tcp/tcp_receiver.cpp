#include "tcp_receiver.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstring>

#include "frame_check.hpp"

namespace epd::transport::tcp {
namespace {

constexpr size_t kDrainChunk = 64 << 10;
// Small frames are acked together: at most this many, and never while more bytes already wait to be read.
constexpr uint32_t kAckEvery = 32;
constexpr uint64_t kAckAlwaysAbove = 64 << 10;
// An unauthenticated connection must show the token this soon, and may have this many frames refused first
// (a writer with a stale descriptor hears bad_token a few times; a stranger is cut off).
constexpr int kAuthDeadlineSeconds = 10;
constexpr uint32_t kMaxRefusedBeforeAuth = 8;
// How long a connection whose hello was refused is read (and discarded) while its writer closes it.
constexpr int kRefusedLingerSeconds = 1;

void set_recv_timeout(int fd, int seconds) {
  timeval tv{seconds, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
}

std::string address_of(const sockaddr_storage& sa) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (sa.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(sa).sin_addr, buf, sizeof(buf));
  else if (sa.ss_family == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(sa).sin6_addr, buf, sizeof(buf));
  return buf[0] ? buf : "unknown";
}

// Receives a small frame's `len` payload bytes into `dst` and, in the same system calls, whatever of the
// next frame's header has already arrived (appended to next[0..have)). While small frames stream that is
// one system call per frame instead of two (header, then payload). It never waits for the next header.
bool recv_payload_and_next(int fd, uint8_t* dst, uint64_t len, uint8_t* next, size_t& have) {
  for (uint64_t got = 0; got < len;) {
    std::array<iovec, 2> iov{iovec{dst + got, len - got}, iovec{next + have, sizeof(WriteHeader) - have}};
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = iov.size();
    const ssize_t r = recvmsg(fd, &msg, 0);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;  // closed, shut down, or the unauthenticated deadline (SO_RCVTIMEO) passed
    }
    const uint64_t to_payload = std::min<uint64_t>(static_cast<uint64_t>(r), len - got);
    got += to_payload;
    have += static_cast<size_t>(r) - to_payload;
  }
  return true;
}

bool send_reply(int fd, uint8_t type, ErrorCode code, uint64_t seq) {
  Reply r;
  r.type = type;
  r.code = static_cast<uint16_t>(code);
  r.seq = seq;
  return send_exact(fd, &r, sizeof(r));
}

}  // namespace

Result<std::unique_ptr<Receiver>> Receiver::start(const Endpoint& at, uint64_t token, std::string name,
                                                  std::shared_ptr<FenceTable> fences) {
  uint16_t port = 0;
  auto fd = listen_on(at, &port);
  if (!fd) return fd.error();
  const int wake = eventfd(0, EFD_CLOEXEC);
  if (wake < 0) {
    close(*fd);
    return make_error(ErrorCode::io_error, std::string("eventfd: ") + strerror(errno));
  }
  std::unique_ptr<Receiver> r(new Receiver(*fd, wake, token, std::move(name),
                                           at.host + ":" + std::to_string(port), std::move(fences)));
  r->acceptor_ = std::thread([p = r.get()] { p->accept_loop(); });
  return r;
}

Receiver::Receiver(int listen_fd, int wake_fd, uint64_t token, std::string name, std::string endpoint,
                   std::shared_ptr<FenceTable> fences)
    : listen_fd_(listen_fd),
      wake_fd_(wake_fd),
      token_(token),
      name_(std::move(name)),
      endpoint_(std::move(endpoint)),
      fences_(std::move(fences)) {}

Receiver::~Receiver() {
  stop_.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] auto n = write(wake_fd_, &one, sizeof(one));
  acceptor_.join();
  std::lock_guard lock(conns_mu_);
  for (auto& c : conns_) shutdown(c.fd, SHUT_RDWR);  // unblocks recv in serve()
  for (auto& c : conns_) {
    c.thread.join();
    close(c.fd);
  }
  conns_.clear();
  close(listen_fd_);
  close(wake_fd_);
}

void Receiver::add_region(uint64_t base, uint64_t length) {
  std::unique_lock lock(regions_mu_);
  regions_.push_back({base, length});
}

uint8_t* Receiver::find(uint64_t addr, uint64_t len) const {
  std::shared_lock lock(regions_mu_);
  for (const Span& s : regions_)
    if (range_inside(s.base, s.length, addr, len)) return reinterpret_cast<uint8_t*>(addr);
  return nullptr;
}

void Receiver::reap_finished() {
  std::lock_guard lock(conns_mu_);
  for (auto it = conns_.begin(); it != conns_.end();) {
    if (it->done.load()) {
      it->thread.join();
      close(it->fd);
      it = conns_.erase(it);
    } else {
      ++it;
    }
  }
}

void Receiver::leave_unauthenticated(Conn& conn) {
  if (!conn.counts_unauthenticated) return;
  conn.counts_unauthenticated = false;
  gate_.left_unauthenticated(conn.source);
}

void Receiver::accept_loop() {
  pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
  while (!stop_.load()) {
    const int r = poll(fds, 2, 1000);
    reap_finished();
    if (r <= 0 || stop_.load()) continue;
    if (!(fds[0].revents & POLLIN)) continue;
    sockaddr_storage from{};
    socklen_t from_len = sizeof(from);
    const int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&from), &from_len, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::string source = address_of(from);
    if (auto v = gate_.admit(source); v != ConnectionGate::Verdict::admitted) {
      if (gate_.first_refusal_of(source))
        spdlog::warn("transport tcp[{}]: refusing data connections from {}: {} (logged once per source)",
                     name_, source,
                     v == ConnectionGate::Verdict::too_many_connections
                         ? "the receiver holds its limit of connections"
                         : "too many of its connections have not shown the segment token");
      close(fd);
      continue;
    }
    set_recv_timeout(fd, kAuthDeadlineSeconds);
    set_no_delay(fd);  // acks must leave at once: Nagle + the writer's delayed ACK stalled batches 40 ms
    std::lock_guard lock(conns_mu_);
    Conn& c = conns_.emplace_back();
    c.fd = fd;
    c.source = std::move(source);
    c.thread = std::thread([this, &c] {
      serve(c);
      c.done.store(true);
    });
  }
}

void Receiver::serve(Conn& conn) {
  const int fd = conn.fd;
  std::vector<uint8_t> scratch;  // only for draining refused payloads
  uint64_t ack_seq = 0;
  uint32_t unacked = 0;
  uint32_t refused_before_auth = 0;
  auto authenticate = [&] {
    if (conn.authenticated) return;
    conn.authenticated = true;
    leave_unauthenticated(conn);
    set_recv_timeout(fd, 0);  // a writer's lane may idle as long as it likes
  };
  WriteHeader h;
  std::array<uint8_t, sizeof(WriteHeader)> next;  // the next header's first `have` bytes, read ahead
  size_t have = 0;
  while (!stop_.load(std::memory_order_relaxed)) {
    // peer closed or we are shutting down
    if (have < next.size() && !recv_exact(fd, next.data() + have, next.size() - have)) break;
    std::memcpy(&h, next.data(), sizeof(h));
    have = 0;
    if (is_hello(h)) {
      if (h.token == token_.load(std::memory_order_acquire)) {
        authenticate();
        continue;
      }
      // A stale or foreign token: this lane can never write. Free its place in the source's budget before
      // the nack leaves, so a writer that hears it and reconnects with the fresh descriptor is never
      // refused for its own stale lanes. Then read until the writer closes (it does on the nack; bounded),
      // so no unread byte turns our close into a reset that could overtake the nack.
      leave_unauthenticated(conn);
      if (send_reply(fd, kTypeNack, ErrorCode::bad_token, 0)) {
        shutdown(fd, SHUT_WR);
        set_recv_timeout(fd, kRefusedLingerSeconds);
        if (scratch.empty()) scratch.resize(kDrainChunk);
        while (recv(fd, scratch.data(), scratch.size(), 0) > 0) {
        }
      }
      break;
    }
    if (const ErrorCode framing = check_write_framing(h); framing != ErrorCode::ok) {
      // Framing is lost: say why, then drop the connection.
      if (framing == ErrorCode::bad_header)
        spdlog::warn("transport tcp[{}]: garbled frame header, closing the connection", name_);
      else
        spdlog::warn("transport tcp[{}]: frame of {} bytes exceeds the limit, closing the connection", name_,
                     h.len);
      send_reply(fd, kTypeNack, framing, h.seq);
      break;
    }
    ErrorCode refused = ErrorCode::ok;
    uint8_t* dst = nullptr;
    auto admission = FenceTable::Admission::unfenced;
    if (h.token != token_.load(std::memory_order_acquire)) {
      refused = ErrorCode::bad_token;
    } else {
      authenticate();
      if (!(dst = find(h.addr, h.len)))
        refused = ErrorCode::out_of_range;
      else if (fences_ &&
               (admission = fences_->admit(h.fence, h.addr, h.len)) == FenceTable::Admission::refused)
        refused = ErrorCode::fenced;  // a stale writer: its grant was revoked, the memory may be reused
    }
    if (refused != ErrorCode::ok) {
      if (scratch.empty()) scratch.resize(kDrainChunk);
      uint64_t left = h.len;
      bool ok = true;
      while (ok && left > 0) {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left, scratch.size()));
        ok = recv_exact(fd, scratch.data(), n);
        left -= n;
      }
      // A nack also acknowledges every earlier frame, so pending acks need no flush.
      if (!ok || !send_reply(fd, kTypeNack, refused, h.seq)) break;
      unacked = 0;
      if (!conn.authenticated && ++refused_before_auth >= kMaxRefusedBeforeAuth) {
        spdlog::warn("transport tcp[{}]: closing a connection from {}: {} frames without the segment token",
                     name_, conn.source, refused_before_auth);
        break;
      }
      continue;
    }
    // Straight into place; a small frame reads ahead into the next header in the same calls.
    const bool placed = h.len >= kAckAlwaysAbove ? recv_exact(fd, dst, h.len)
                                                 : recv_payload_and_next(fd, dst, h.len, next.data(), have);
    if (admission == FenceTable::Admission::admitted) fences_->landed(h.fence);
    if (!placed) break;
    ack_seq = h.seq;
    ++unacked;
    // Bytes of the next frame already read ahead mean the writer is still sending: no ack needed yet.
    if (h.len >= kAckAlwaysAbove || unacked >= kAckEvery || (have == 0 && readable_bytes(fd) == 0)) {
      if (!send_reply(fd, kTypeAck, ErrorCode::ok, ack_seq)) break;
      unacked = 0;
    }
  }
  // The place in the gate goes back before the peer can see the end, so a peer that waits for it and
  // reconnects is never refused for this connection.
  gate_.closed(conn.source, conn.counts_unauthenticated);
  shutdown(fd, SHUT_RDWR);
}

}  // namespace epd::transport::tcp

#include "handshake.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace epd::transport::rdma {
namespace {

constexpr uint8_t kMagic[4] = {'E', 'P', 'D', 'R'};
constexpr uint8_t kGrantMagic[4] = {'E', 'P', 'D', 'G'};

void put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}
void put32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
void put64(std::vector<uint8_t>& b, uint64_t v) {
  for (int s = 56; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
uint64_t get(std::span<const uint8_t> b, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v = (v << 8) | b[at + i];
  return v;
}
Error malformed(std::string what) {
  return make_error(ErrorCode::transfer_failed, "rdma handshake: " + what);
}
Error sys_error(ErrorCode code, const std::string& what) {
  return make_error(code, what + ": " + std::strerror(errno));
}
int remaining_ms(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left < 0 ? 0 : int(left);
}
// Splits "host:port" (host may be [v6]).
bool split_endpoint(const std::string& ep, std::string& host, std::string& port) {
  auto colon = ep.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  host = ep.substr(0, colon);
  port = ep.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return !port.empty();
}

}  // namespace

std::vector<uint8_t> encode_hello(const Hello& h) {
  std::vector<uint8_t> b;
  b.reserve(kHelloFixedBytes + 8 * h.qps.size());
  for (uint8_t m : kMagic)
    b.push_back(m);  // (vector::insert trips a GCC 12 -Wstringop-overflow false positive)
  b.push_back(kHandshakeVersion);
  b.push_back(uint8_t(h.kind));
  put16(b, uint16_t(h.qps.size()));
  b.push_back(h.mtu);
  b.push_back(uint8_t(h.reason));
  put16(b, h.lid);
  for (uint8_t g : h.gid) b.push_back(g);
  put64(b, h.target_incarnation);
  put64(b, h.target_token);
  for (const auto& q : h.qps) {
    put32(b, q.qpn);
    put32(b, q.psn);
  }
  return b;
}

Result<size_t> hello_tail_bytes(std::span<const uint8_t> fixed) {
  if (fixed.size() < kHelloFixedBytes) return malformed("short header");
  if (std::memcmp(fixed.data(), kMagic, 4) != 0) return malformed("bad magic");
  if (fixed[4] != kHandshakeVersion) return malformed("unsupported version " + std::to_string(fixed[4]));
  const uint8_t kind = fixed[5];
  if (kind < 1 || kind > 3) return malformed("bad kind " + std::to_string(kind));
  const auto count = get(fixed, 6, 2);
  if (count > kMaxQpsPerLink) return malformed("too many qps " + std::to_string(count));
  if (count == 0 && kind != uint8_t(HelloKind::reject)) return malformed("no qps");
  return size_t(count * 8);
}

Result<Hello> decode_hello(std::span<const uint8_t> b) {
  auto tail = hello_tail_bytes(b);
  if (!tail) return tail.error();
  if (b.size() != kHelloFixedBytes + *tail) return malformed("length mismatch");
  Hello h;
  h.kind = HelloKind(b[5]);
  h.mtu = b[8];
  if (b[9] > uint8_t(HandshakeReject::malformed)) return malformed("bad reject reason");
  h.reason = HandshakeReject(b[9]);
  h.lid = uint16_t(get(b, 10, 2));
  std::memcpy(h.gid.data(), b.data() + 12, 16);
  h.target_incarnation = get(b, 28, 8);
  h.target_token = get(b, 36, 8);
  for (size_t at = kHelloFixedBytes; at < b.size(); at += 8) {
    h.qps.push_back({uint32_t(get(b, at, 4)), uint32_t(get(b, at + 4, 4))});
  }
  if (h.kind != HelloKind::reject && (h.mtu < 1 || h.mtu > 5)) return malformed("bad mtu");
  return h;
}

Result<int> listen_tcp(const std::string& host, uint16_t port, uint16_t& bound_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port_s = std::to_string(port);
  if (int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_s.c_str(), &hints, &res); rc != 0) {
    return make_error(ErrorCode::config_error, "rdma handshake listen " + host + ": " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return sys_error(ErrorCode::io_error, "rdma handshake socket");
  }
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, res->ai_addr, res->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    auto err = sys_error(ErrorCode::io_error, "rdma handshake bind " + host + ":" + port_s);
    freeaddrinfo(res);
    close(fd);
    return err;
  }
  freeaddrinfo(res);
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                        : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
  return fd;
}

Result<int> connect_tcp(const std::string& endpoint, Clock::time_point deadline) {
  std::string host, port;
  if (!split_endpoint(endpoint, host, port)) {
    return make_error(ErrorCode::peer_unreachable, "bad rdma handshake endpoint '" + endpoint + "'");
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return make_error(ErrorCode::peer_unreachable, "rdma handshake " + endpoint + ": " + gai_strerror(rc));
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) {
    freeaddrinfo(res);
    return sys_error(ErrorCode::io_error, "rdma handshake socket");
  }
  int rc = ::connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    rc = poll(&p, 1, remaining_ms(deadline));
    int err = 0;
    socklen_t len = sizeof err;
    if (rc == 1) getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (rc != 1 || err != 0) {
      close(fd);
      errno = rc == 0 ? ETIMEDOUT : err;
      return sys_error(ErrorCode::peer_unreachable, "rdma handshake connect " + endpoint);
    }
  } else if (rc != 0) {
    auto e = sys_error(ErrorCode::peer_unreachable, "rdma handshake connect " + endpoint);
    close(fd);
    return e;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

Status write_all(int fd, std::span<const uint8_t> bytes, Clock::time_point deadline) {
  size_t done = 0;
  while (done < bytes.size()) {
    pollfd p{fd, POLLOUT, 0};
    int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc == 0) return make_error(ErrorCode::timeout, "rdma handshake write timed out");
    if (rc < 0) {
      if (errno == EINTR) continue;
      return sys_error(ErrorCode::io_error, "rdma handshake poll");
    }
    ssize_t n = send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n <= 0) return sys_error(ErrorCode::peer_died, "rdma handshake write");
    done += size_t(n);
  }
  return {};
}

Status read_exact(int fd, std::span<uint8_t> out, Clock::time_point deadline) {
  size_t done = 0;
  while (done < out.size()) {
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, remaining_ms(deadline));
    if (rc == 0) return make_error(ErrorCode::timeout, "rdma handshake read timed out");
    if (rc < 0) {
      if (errno == EINTR) continue;
      return sys_error(ErrorCode::io_error, "rdma handshake poll");
    }
    ssize_t n = recv(fd, out.data() + done, out.size() - done, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
    if (n == 0) return make_error(ErrorCode::peer_died, "rdma handshake: peer closed the connection");
    if (n < 0) return sys_error(ErrorCode::peer_died, "rdma handshake read");
    done += size_t(n);
  }
  return {};
}

Result<Hello> read_hello(int fd, Clock::time_point deadline) {
  std::vector<uint8_t> buf(kHelloFixedBytes);
  if (auto st = read_exact(fd, buf, deadline); !st) return st.error();
  auto tail = hello_tail_bytes(buf);
  if (!tail) return tail.error();
  buf.resize(kHelloFixedBytes + *tail);
  if (auto st = read_exact(fd, std::span(buf).subspan(kHelloFixedBytes), deadline); !st) return st.error();
  return decode_hello(buf);
}

std::vector<uint8_t> encode_grant_query(uint64_t key) {
  std::vector<uint8_t> b;
  for (uint8_t m : kGrantMagic) b.push_back(m);
  put64(b, key);
  return b;
}

Result<uint64_t> decode_grant_query(std::span<const uint8_t> bytes) {
  if (bytes.size() != kGrantQueryBytes || std::memcmp(bytes.data(), kGrantMagic, 4) != 0)
    return malformed("bad grant query");
  return get(bytes, 4, 8);
}

std::vector<uint8_t> encode_grant_reply(std::span<const GrantRun> runs) {
  std::vector<uint8_t> b;
  for (uint8_t m : kGrantMagic) b.push_back(m);
  const auto n = uint32_t(std::min<size_t>(runs.size(), kMaxGrantRuns));
  put32(b, n);
  for (uint32_t i = 0; i < n; ++i) {
    put64(b, runs[i].addr);
    put64(b, runs[i].len);
    put32(b, runs[i].rkey);
  }
  return b;
}

Result<std::vector<GrantRun>> read_grant_reply(int fd, Clock::time_point deadline) {
  std::vector<uint8_t> head(8);
  if (auto st = read_exact(fd, head, deadline); !st) return st.error();
  if (std::memcmp(head.data(), kGrantMagic, 4) != 0) return malformed("bad grant reply");
  const auto n = uint32_t(get(head, 4, 4));
  if (n > kMaxGrantRuns) return malformed("grant reply too long");
  std::vector<uint8_t> body(size_t(n) * 20);
  if (auto st = read_exact(fd, body, deadline); !st) return st.error();
  std::vector<GrantRun> runs(n);
  for (uint32_t i = 0; i < n; ++i)
    runs[i] = {get(body, i * 20, 8), get(body, i * 20 + 8, 8), uint32_t(get(body, i * 20 + 16, 4))};
  return runs;
}

bool peer_gone(int fd) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  uint8_t b;  // nothing is ever sent after the hello: readable means EOF or garbage
  ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR) || n > 0;
}

}  // namespace epd::transport::rdma

#include "socket_util.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

namespace epd::transport::tcp {
namespace {

Error sys_error(ErrorCode code, const std::string& what, int err) {
  return make_error(code, what + ": " + strerror(err));
}

bool make_addr(const Endpoint& ep, sockaddr_in* sa) {
  std::memset(sa, 0, sizeof(*sa));
  sa->sin_family = AF_INET;
  sa->sin_port = htons(ep.port);
  return inet_pton(AF_INET, ep.host.c_str(), &sa->sin_addr) == 1;
}

}  // namespace

Result<Endpoint> parse_endpoint(const std::string& text) {
  const auto colon = text.rfind(':');
  if (colon == std::string::npos)
    return make_error(ErrorCode::config_error, "endpoint without port: " + text);
  Endpoint ep{text.substr(0, colon), 0};
  const char* b = text.data() + colon + 1;
  const char* e = text.data() + text.size();
  auto [p, ec] = std::from_chars(b, e, ep.port);
  if (ec != std::errc() || p != e || b == e)
    return make_error(ErrorCode::config_error, "bad port in " + text);
  sockaddr_in sa;
  if (!make_addr(ep, &sa)) return make_error(ErrorCode::config_error, "not an IPv4 address: " + ep.host);
  return ep;
}

Result<int> listen_on(const Endpoint& at, uint16_t* bound_port) {
  sockaddr_in sa;
  if (!make_addr(at, &sa)) return make_error(ErrorCode::config_error, "not an IPv4 address: " + at.host);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return sys_error(ErrorCode::io_error, "socket", errno);
  const int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 || listen(fd, 128) != 0) {
    const int e = errno;
    close(fd);
    return sys_error(ErrorCode::io_error, "listen on " + at.host + ":" + std::to_string(at.port), e);
  }
  socklen_t len = sizeof(sa);
  getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len);
  *bound_port = ntohs(sa.sin_port);
  return fd;
}

Result<int> connect_to(const Endpoint& to, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds send_timeout) {
  sockaddr_in sa;
  if (!make_addr(to, &sa)) return make_error(ErrorCode::config_error, "not an IPv4 address: " + to.host);
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return sys_error(ErrorCode::io_error, "socket", errno);
  const std::string where = "connect to " + to.host + ":" + std::to_string(to.port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) {
    if (errno != EINPROGRESS) {
      const int e = errno;
      close(fd);
      return sys_error(ErrorCode::peer_unreachable, where, e);
    }
    pollfd p{fd, POLLOUT, 0};
    int r;
    do r = poll(&p, 1, static_cast<int>(timeout.count()));
    while (r < 0 && errno == EINTR);
    int err = 0;
    socklen_t len = sizeof(err);
    if (r <= 0)
      err = r == 0 ? ETIMEDOUT : errno;
    else
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      close(fd);
      return sys_error(ErrorCode::peer_unreachable, where, err);
    }
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  set_no_delay(fd);
  timeval tv{static_cast<time_t>(send_timeout.count() / 1000),
             static_cast<suseconds_t>(send_timeout.count() % 1000 * 1000)};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  return fd;
}

void set_no_delay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

bool recv_exact(int fd, void* buf, size_t n) {
  auto* p = static_cast<uint8_t*>(buf);
  while (n > 0) {
    const ssize_t r = recv(fd, p, n, MSG_WAITALL);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0 || errno != EINTR) {
      return false;
    }
  }
  return true;
}

bool send_exact(int fd, const void* buf, size_t n) {
  iovec iov{const_cast<void*>(buf), n};
  return send_iov(fd, &iov, 1) == 0;
}

iovec* advance_iov(iovec* iov, size_t& count, size_t n) {
  while (count > 0 && n >= iov->iov_len) {
    n -= iov->iov_len;
    ++iov;
    --count;
  }
  if (count > 0) {  // a partial send leaves us in the middle of one iovec
    iov->iov_base = static_cast<uint8_t*>(iov->iov_base) + n;
    iov->iov_len -= n;
  }
  return iov;
}

int send_iov(int fd, iovec* iov, size_t count) {
  while (count > 0) {
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = count;
    const ssize_t r = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (r < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    iov = advance_iov(iov, count, static_cast<size_t>(r));
  }
  return 0;
}

ssize_t send_now(int fd, iovec* iov, size_t count) {
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = count;
  for (;;) {
    const ssize_t r = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) return r;
    if (errno == EINTR) continue;
    return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -errno;
  }
}

size_t readable_bytes(int fd) {
  int n = 0;
  if (ioctl(fd, FIONREAD, &n) != 0 || n < 0) return 0;
  return static_cast<size_t>(n);
}

}  // namespace epd::transport::tcp

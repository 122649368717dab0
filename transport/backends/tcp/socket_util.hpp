#pragma once
// Thin, bounded wrappers over POSIX sockets used by both sides of the tcp backend.
#include <sys/types.h>
#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "epd/transport/types.hpp"

namespace epd::transport::tcp {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
};
// "a.b.c.d:port" (IPv4 literal only: no resolver on the data path).
Result<Endpoint> parse_endpoint(const std::string& text);

// Listening socket bound to host:port (0 = any free port); returns the fd and the bound port.
Result<int> listen_on(const Endpoint& at, uint16_t* bound_port);
// Connects within `timeout`; the socket is blocking, TCP_NODELAY, with SO_SNDTIMEO = send_timeout.
Result<int> connect_to(const Endpoint& to, std::chrono::milliseconds timeout,
                       std::chrono::milliseconds send_timeout);

// Turns Nagle off. Both ends need it: the receiver's acks are small writes too, and Nagle would hold the
// second of two back-to-back acks until the writer's delayed ACK (40 ms) for the first (docs/transport.md).
void set_no_delay(int fd);

// Reads exactly n bytes; false on EOF, error or shutdown.
bool recv_exact(int fd, void* buf, size_t n);
// Writes exactly n bytes (MSG_NOSIGNAL); false on error.
bool send_exact(int fd, const void* buf, size_t n);
// Writes every byte of iov[0..count) (modifies iov); returns 0 or the errno that stopped it.
int send_iov(int fd, iovec* iov, size_t count);
// One sendmsg that never blocks: the bytes the socket took (0 when its buffer is full), or -errno.
ssize_t send_now(int fd, iovec* iov, size_t count);
// Drops the first n bytes of iov[0..count): returns the first iovec left (trimmed) and lowers count.
iovec* advance_iov(iovec* iov, size_t& count, size_t n);
// Bytes waiting in the receive queue (0 on error).
size_t readable_bytes(int fd);

}  // namespace epd::transport::tcp

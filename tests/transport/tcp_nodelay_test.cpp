// Both ends of every tcp lane run without Nagle. The receiver's acks are small writes: with Nagle on its
// side, the second of two back-to-back acks waited for the writer's delayed ACK of the first (40 ms), which
// stalled batched writes (docs/transport.md, "Why batched writes stalled"). The engine and its target share
// this process, so the test inspects the very sockets of both ends.
#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "epd/transport/backend_info.hpp"
#include "tcp/tcp_info.hpp"
#include "test_util.hpp"

using namespace epd::test;
using namespace epd::transport::tcp;
using namespace std::chrono_literals;

namespace {

struct TcpSocket {
  uint16_t local_port = 0, peer_port = 0;
  bool no_delay = false;
};

// Every connected TCP socket of this process.
std::vector<TcpSocket> connected_tcp_sockets() {
  std::vector<TcpSocket> out;
  DIR* dir = opendir("/proc/self/fd");
  REQUIRE(dir != nullptr);
  while (dirent* e = readdir(dir)) {
    const int fd = atoi(e->d_name);
    struct stat st {};
    if (fd <= 2 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_in local{}, peer{};
    socklen_t ll = sizeof(local), pl = sizeof(peer);
    int type = 0;
    socklen_t tl = sizeof(type);
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) != 0 || type != SOCK_STREAM) continue;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 || local.sin_family != AF_INET)
      continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) continue;  // a listener
    int no_delay = 0;
    socklen_t nl = sizeof(no_delay);
    getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &no_delay, &nl);
    out.push_back({ntohs(local.sin_port), ntohs(peer.sin_port), no_delay != 0});
  }
  closedir(dir);
  return out;
}

}  // namespace

TEST_CASE("tcp: both ends of every lane turn Nagle off", "[tcp]") {
  LocalTarget target("tcp", 1, 1 << 20);
  REQUIRE(target.ok());
  const auto& d = target.descriptor();
  const auto info = decode_info<TcpInfo>(d, kName);
  REQUIRE(info);
  const uint16_t port =
      static_cast<uint16_t>(std::stoi(info->endpoint.substr(info->endpoint.rfind(':') + 1)));
  EngineConfig config;
  config.options.set("tcp_lanes", int64_t{3});
  auto init = make_initiator("tcp", 1 << 20, config);
  REQUIRE(init.engine);
  auto s = init.engine->open_session(d);
  REQUIRE(s);
  // One write per lane, each acked: every lane has been accepted and served by now.
  fill_random(init.src.base, 3 * 4096, 3);
  auto b = (*s)->submit({WriteOp{init.src.addr(), d.regions[0].base, 4096},
                         WriteOp{init.src.addr() + 4096, d.regions[0].base + 4096, 4096},
                         WriteOp{init.src.addr() + 8192, d.regions[0].base + 8192, 4096}});
  REQUIRE(b);
  REQUIRE((*b)->wait(10s));
  REQUIRE((*b)->status().ok());

  int writer_ends = 0, receiver_ends = 0;
  for (const TcpSocket& sock : connected_tcp_sockets()) {
    if (sock.peer_port == port) {
      ++writer_ends;
      CHECK(sock.no_delay);
    } else if (sock.local_port == port) {
      ++receiver_ends;
      CHECK(sock.no_delay);
    }
  }
  CHECK(writer_ends == 3);
  CHECK(receiver_ends == 3);
}

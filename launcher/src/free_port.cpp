#include "epd/launcher/free_port.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

namespace epd::launcher {
namespace {

bool bindable(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return free;
}

}  // namespace

int free_port() {
  static std::mutex mu;
  static std::set<int> given;
  static std::mt19937 rng(uint32_t(::getpid()) * 2654435761u);
  std::lock_guard lock(mu);
  int low = 32768;
  if (std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range"); range) range >> low;
  const int first = 10000, last = std::max(first + 1000, low - 1);
  for (;;) {
    const int port = first + int(rng() % uint32_t(last - first));
    if (!given.count(port) && bindable(port)) {
      given.insert(port);
      return port;
    }
  }
}

}  // namespace epd::launcher

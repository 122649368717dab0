#include "epd/launcher/free_port.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

namespace epd::launcher {
namespace {

// Claims `port` among this host's processes: an exclusive flock on a file named after it, held (its
// descriptor left open) until this process exits, so two test processes running side by side never hand
// out the same port (CI saw a role fail to bind a port another test's role had just taken). A claim that
// cannot be made (no such directory) leaves the bind check alone to decide.
bool claim(int port) {
  static const std::filesystem::path dir = [] {
    std::error_code ec;
    std::filesystem::path base = std::filesystem::temp_directory_path(ec);
    if (ec) base = "/tmp";  // never a directory relative to wherever we run
    auto d = base / "epd-ports";
    std::filesystem::create_directories(d, ec);
    ::chmod(d.c_str(), 01777);  // shared by every user's tests, as /tmp is
    return d;
  }();
  const int fd = ::open((dir / std::to_string(port)).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return true;
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;  // kept open: the claim lasts this process
  ::close(fd);
  return false;
}

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

bool fetch_blocks_port(int port) {
  static constexpr int kBad[] = {
      1,    7,    9,    11,   13,   15,   17,   19,   20,   21,   22,   23,   25,   37,   42,   43,   53,
      69,   77,   79,   87,   95,   101,  102,  103,  104,  109,  110,  111,  113,  115,  117,  119,  123,
      135,  137,  139,  143,  161,  179,  389,  427,  465,  512,  513,  514,  515,  526,  530,  531,  532,
      540,  548,  554,  556,  563,  587,  601,  636,  989,  990,  993,  995,  1719, 1720, 1723, 2049, 3659,
      4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679, 6697, 10080};
  return std::find(std::begin(kBad), std::end(kBad), port) != std::end(kBad);
}

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
    if (!given.count(port) && !fetch_blocks_port(port) && bindable(port) && claim(port)) {
      given.insert(port);
      return port;
    }
  }
}

}  // namespace epd::launcher

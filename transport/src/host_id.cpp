#include "host_id.hpp"

#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <fstream>

namespace epd::transport::detail {

std::string local_host_id() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::getline(in, boot);
  return std::string(host) + ":" + boot;
}

uint64_t random_u64() {
  uint64_t v = 0;
  while (v == 0) {
    if (getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) {
      // getrandom cannot fail for 8 bytes once the pool is up; mix the clock in case it did.
      v ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) *
           0x9e3779b97f4a7c15ull;
    }
  }
  return v;
}

}  // namespace epd::transport::detail

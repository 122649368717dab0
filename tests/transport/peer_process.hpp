#pragma once
// A target engine in a child process (transport_peer), driven over its stdin/stdout. The destructor
// always SIGKILLs and reaps it; every read has a deadline so a stuck child fails the test instead of hanging
// it.
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "epd/protocol/segment.hpp"

namespace epd::test {

class PeerProcess {
 public:
  PeerProcess(const std::string& instance, const std::string& offer, int regions, uint64_t region_bytes);
  ~PeerProcess();
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  bool started() const { return desc_.has_value(); }
  const protocol::SegmentDescriptor& descriptor() const { return *desc_; }
  pid_t pid() const { return pid_; }

  std::optional<uint64_t> checksum(uint64_t addr, uint64_t len);
  bool fill(uint64_t addr, uint64_t len, uint8_t byte);
  // SIGKILL now and reap (bounded).
  void kill_now();

 private:
  std::optional<std::string> command(const std::string& line);
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);

  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;
  std::string buffered_;
  std::optional<protocol::SegmentDescriptor> desc_;
};

}  // namespace epd::test

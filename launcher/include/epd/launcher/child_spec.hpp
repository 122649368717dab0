#pragma once
// What the launcher runs and how it treats deaths: plain values, filled by the caller (the app reads a
// cluster config; tests write them by hand).
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace epd::launcher {

struct ChildSpec {
  std::string id;                 // log prefix "[id] " and the key for status queries
  std::vector<std::string> argv;  // argv[0] is the executable's path (no PATH search)
};

// A child that exits while the group is running is restarted after an exponential backoff, unless it
// already died `max_restarts` times within `window` - then the launcher gives up on it.
struct RestartPolicy {
  bool enabled = true;
  std::chrono::milliseconds initial_backoff{200};
  std::chrono::milliseconds max_backoff{5000};
  uint32_t max_restarts = 5;
  std::chrono::milliseconds window{60000};
};

struct GroupOptions {
  std::chrono::milliseconds stop_grace{5000};  // SIGTERM -> SIGKILL
  std::chrono::milliseconds kill_wait{2000};   // after SIGKILL, how long to wait for the kernel to reap
  RestartPolicy restart;
};

}  // namespace epd::launcher

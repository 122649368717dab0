#pragma once
// The restart decision for one child: exponential backoff (initial, doubling, capped) and a limit of
// restarts within a sliding window. Pure logic with the time passed in, so it is tested without sleeping.
#include <chrono>
#include <cstdint>
#include <deque>

#include "epd/launcher/child_spec.hpp"

namespace epd::launcher {

class RestartTracker {
 public:
  using Clock = std::chrono::steady_clock;

  struct Decision {
    bool restart = false;
    std::chrono::milliseconds delay{0};
    uint32_t attempt = 0;  // restarts within the window, this one included (the "2" of "restart 2/5")
  };

  explicit RestartTracker(RestartPolicy policy) : policy_(policy) {}

  // The child died at `now`: restart it (and after how long), or give up. A restart is recorded.
  Decision on_exit(Clock::time_point now);
  uint64_t total_restarts() const { return total_; }
  const RestartPolicy& policy() const { return policy_; }

 private:
  RestartPolicy policy_;
  std::deque<Clock::time_point> recent_;  // restarts inside the window
  uint64_t total_ = 0;
};

}  // namespace epd::launcher

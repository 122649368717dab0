#pragma once
// The failure rate of one transfer session over its last `size` write outcomes. A session whose rate
// reaches the threshold (once at least half the window is filled, so one early failure does not count
// as a rate) is recycled before it fails more rooms.
#include <cstdint>
#include <vector>

namespace epd::actors {

class FailureWindow {
 public:
  FailureWindow(uint32_t size, uint32_t threshold_pct);

  void record(bool failed);
  uint32_t samples() const { return samples_; }
  uint32_t failures() const { return failures_; }
  bool above_threshold() const;

 private:
  std::vector<bool> ring_;
  uint32_t next_ = 0;
  uint32_t samples_ = 0;
  uint32_t failures_ = 0;
  uint32_t threshold_pct_;
};

}  // namespace epd::actors

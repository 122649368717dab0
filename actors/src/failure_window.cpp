#include "failure_window.hpp"

#include <algorithm>

namespace epd::actors {

FailureWindow::FailureWindow(uint32_t size, uint32_t threshold_pct)
    : ring_(std::max<uint32_t>(size, 1), false), threshold_pct_(threshold_pct) {}

void FailureWindow::record(bool failed) {
  if (samples_ == ring_.size())
    failures_ -= ring_[next_] ? 1 : 0;
  else
    ++samples_;
  ring_[next_] = failed;
  failures_ += failed ? 1 : 0;
  next_ = uint32_t((next_ + 1) % ring_.size());
}

bool FailureWindow::above_threshold() const {
  const uint32_t min_samples = std::max<uint32_t>(1, uint32_t(ring_.size() + 1) / 2);
  return threshold_pct_ > 0 && samples_ >= min_samples &&
         uint64_t(failures_) * 100 >= uint64_t(threshold_pct_) * samples_;
}

}  // namespace epd::actors

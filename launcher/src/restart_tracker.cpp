#include "epd/launcher/restart_tracker.hpp"

#include <algorithm>

namespace epd::launcher {

RestartTracker::Decision RestartTracker::on_exit(Clock::time_point now) {
  if (!policy_.enabled) return {};
  while (!recent_.empty() && now - recent_.front() >= policy_.window) recent_.pop_front();
  if (recent_.size() >= policy_.max_restarts) return {};
  recent_.push_back(now);
  ++total_;
  Decision d;
  d.restart = true;
  d.attempt = uint32_t(recent_.size());
  // A child that stayed up for a whole window starts again from the initial backoff.
  auto delay = policy_.initial_backoff;
  for (uint32_t i = 1; i < d.attempt && delay < policy_.max_backoff; ++i) delay *= 2;
  d.delay = std::min(delay, policy_.max_backoff);
  return d;
}

}  // namespace epd::launcher

#include "epd/http/auth_throttle.hpp"

#include <algorithm>

namespace epd::http {

uint32_t AuthThrottle::blocked_for(std::string_view address, Clock::time_point now) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(std::string(address));
  if (it == entries_.end() || it->second.blocked_until <= now) return 0;
  ++throttled_;
  const auto left = std::chrono::ceil<std::chrono::seconds>(it->second.blocked_until - now);
  return static_cast<uint32_t>(std::max<int64_t>(1, left.count()));
}

void AuthThrottle::failed(std::string_view address, Clock::time_point now) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(std::string(address));
  if (it == entries_.end()) {
    if (entries_.size() >= limits_.max_addresses) make_room(now);
    it = entries_.emplace(std::string(address), Entry{now, 0, {}}).first;
  }
  Entry& e = it->second;
  if (now - e.window_start >= limits_.window) {
    e.window_start = now;
    e.failures = 0;
  }
  if (++e.failures >= limits_.max_failures) {
    e.blocked_until = now + limits_.cooldown;
    e.window_start = e.blocked_until;  // the count starts again after the cooldown
    e.failures = 0;
  }
}

// Drops entries that neither block nor count any more; when every entry is live, the one whose window
// started first (a full table must not let a flood of new sources lock the table, so one goes).
void AuthThrottle::make_room(Clock::time_point now) {
  std::erase_if(entries_, [&](const auto& kv) {
    return kv.second.blocked_until <= now && now - kv.second.window_start >= limits_.window;
  });
  if (entries_.size() < limits_.max_addresses) return;
  auto oldest = std::min_element(entries_.begin(), entries_.end(), [](const auto& a, const auto& b) {
    return a.second.window_start < b.second.window_start;
  });
  entries_.erase(oldest);
}

uint64_t AuthThrottle::throttled() const {
  std::lock_guard lock(mu_);
  return throttled_;
}

size_t AuthThrottle::tracked() const {
  std::lock_guard lock(mu_);
  return entries_.size();
}

std::string_view remote_address(std::string_view remote) {
  if (remote.starts_with('[')) {
    const size_t close = remote.find(']');
    return close == std::string_view::npos ? remote : remote.substr(1, close - 1);
  }
  const size_t colon = remote.rfind(':');
  return colon == std::string_view::npos ? remote : remote.substr(0, colon);
}

}  // namespace epd::http

#pragma once
// Slows down key guessing: an address whose requests failed authentication `max_failures` times within
// `window` is refused (429, Retry-After) for `cooldown` before any key it sends is looked at — a correct
// key included, or the answers would still tell a guesser when it hit. Addresses, not connections, are
// counted (a client cannot reset its count by reconnecting); the table is bounded, so a flood of sources
// costs memory only up to `max_addresses`.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

namespace epd::http {

struct AuthThrottleLimits {
  uint32_t max_failures = 20;
  std::chrono::seconds window{60};
  std::chrono::seconds cooldown{60};
  size_t max_addresses = 4096;
};

class AuthThrottle {
 public:
  using Clock = std::chrono::steady_clock;
  explicit AuthThrottle(AuthThrottleLimits limits = {}) : limits_(limits) {}

  // Seconds until `address` may try again; 0 when it may try now.
  uint32_t blocked_for(std::string_view address, Clock::time_point now = Clock::now());
  // A failed attempt from `address` (may start its cooldown).
  void failed(std::string_view address, Clock::time_point now = Clock::now());
  // Requests refused because their address was cooling down.
  uint64_t throttled() const;
  size_t tracked() const;

 private:
  struct Entry {
    Clock::time_point window_start;
    uint32_t failures = 0;
    Clock::time_point blocked_until;  // epoch: not blocked
  };
  void make_room(Clock::time_point now);

  const AuthThrottleLimits limits_;
  mutable std::mutex mu_;
  std::unordered_map<std::string, Entry> entries_;
  uint64_t throttled_ = 0;
};

// The address part of HttpRequest::remote ("1.2.3.4:5678" or "[::1]:5678"; "::1:5678" tolerated).
std::string_view remote_address(std::string_view remote);

}  // namespace epd::http

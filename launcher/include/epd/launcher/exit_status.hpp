#pragma once
// Human-readable wait status ("exited with status 1", "killed by signal 9 (SIGKILL)") and durations.
#include <chrono>
#include <string>

namespace epd::launcher {

std::string describe_wait_status(int status);
// "1.5 s", "400 ms": durations in log lines.
std::string describe_ms(long long ms);
// Whole milliseconds from `a` to `b` (negative when b is earlier), for the above and for poll timeouts.
inline long long ms_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(b - a).count();
}

}  // namespace epd::launcher

#pragma once
// Percentiles of a sample (nearest rank) and the other small figures of benchmark tables.
#include <algorithm>
#include <chrono>
#include <vector>

namespace epd::bench {

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = size_t(p / 100.0 * double(v.size() - 1) + 0.5);
  return v[std::min(rank, v.size() - 1)];
}

inline double max_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// Milliseconds from `t` until now.
inline double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace epd::bench

#pragma once
// Percentiles of a sample (nearest rank), for benchmark tables.
#include <algorithm>
#include <vector>

namespace epd::bench {

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = size_t(p / 100.0 * double(v.size() - 1) + 0.5);
  return v[std::min(rank, v.size() - 1)];
}

}  // namespace epd::bench

#include "epd/metrics/buckets.hpp"

namespace epd::metrics {
namespace {

// 1, 2.5, 5 per decade from `from` up to and including `to`.
std::vector<double> decades(double from, double to) {
  std::vector<double> out;
  for (double d = from; d <= to * 1.0001; d *= 10)
    for (double m : {1.0, 2.5, 5.0})
      if (d * m <= to * 1.0001) out.push_back(d * m);
  return out;
}

}  // namespace

const std::vector<double>& latency_seconds_buckets() {
  static const std::vector<double> b = [] {
    auto v = decades(1e-4, 10);
    v.push_back(30);
    v.push_back(60);
    return v;
  }();
  return b;
}

const std::vector<double>& transfer_seconds_buckets() {
  static const std::vector<double> b = decades(1e-5, 10);
  return b;
}

const std::vector<double>& size_bytes_buckets() {
  static const std::vector<double> b = [] {
    std::vector<double> v;
    for (double x = 256; x <= double(1ull << 30); x *= 4) v.push_back(x);
    return v;
  }();
  return b;
}

}  // namespace epd::metrics

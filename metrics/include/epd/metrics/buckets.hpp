#pragma once
// Histogram bucket layouts shared by every process, so the same histogram from many processes can be summed
// before histogram_quantile (Prometheus can only add series whose buckets match).
#include <vector>

namespace epd::metrics {

// 100 µs .. 60 s, about 2.5 buckets per decade: request latencies, stages, inter-token gaps.
const std::vector<double>& latency_seconds_buckets();
// 10 µs .. 10 s: single transfer jobs (a KV page run over shm takes microseconds).
const std::vector<double>& transfer_seconds_buckets();
// 256 B .. 1 GiB in powers of 4: transfer job sizes.
const std::vector<double>& size_bytes_buckets();

}  // namespace epd::metrics

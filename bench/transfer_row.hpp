#pragma once
// One row of `epd-bench transfer`'s table: an engine backend at one block and batch size next to its
// baseline, or a baseline itself (memcpy, raw-tcp, zmq; baseline "-"). Shared by the table, the CSV and
// the plot.
#include <cstdint>
#include <string>

namespace epd::bench {

struct TransferRow {
  std::string backend;
  uint64_t block = 0, batch = 0;
  double gbps = 0, writes_per_s = 0;  // GB/s = 1e9 bytes/s
  std::string baseline;               // what this engine row is compared with; "-" for a baseline row
  double baseline_gbps = 0, zmq_gbps = 0;
  double avg_us = -1, p50_us = -1, p99_us = -1;  // per batch; -1 for a baseline row
};

}  // namespace epd::bench

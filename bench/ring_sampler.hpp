#pragma once
// Samples the decode instances' staging ring from the router's GET /v1/instances on a side thread, for
// `epd-bench e2e --staged-config`: its table of occupancy over time and its --plot.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

namespace epd::bench {

// One sample, summed over the decode instances that report a ring. The figures are those of each decode's
// latest heartbeat, so they change once per heartbeat interval.
struct RingSample {
  double t_ms = 0;    // since the sampler started
  uint64_t used = 0;  // ring_used: handed out and not yet consumed
  uint64_t peak = 0;  // ring_peak: the highest use in the heartbeat window
  uint64_t ring = 0;  // ring_bytes
};

class RingSampler {
 public:
  RingSampler(std::string host, int port, std::chrono::milliseconds period = std::chrono::milliseconds(50));
  ~RingSampler();
  RingSampler(const RingSampler&) = delete;
  RingSampler& operator=(const RingSampler&) = delete;

  // Stops sampling; samples() is stable afterwards.
  void stop();
  const std::vector<RingSample>& samples() const { return samples_; }

 private:
  void loop();

  std::string host_;
  int port_;
  std::chrono::milliseconds period_;
  std::atomic<bool> done_{false};
  std::vector<RingSample> samples_;  // written by the thread until stop() joins it
  std::thread thread_;
};

}  // namespace epd::bench

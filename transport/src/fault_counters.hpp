#pragma once
// Counters shared by all fault links of one engine.
#include <atomic>
#include <cstdint>

#include "epd/transport/fault.hpp"

namespace epd::transport {

struct FaultCounters {
  std::atomic<uint64_t> ops{0};
  std::atomic<uint64_t> injected_errors{0};
  std::atomic<uint64_t> thrown{0};
  std::atomic<uint64_t> delayed{0};
  std::atomic<uint64_t> links{0};  // fault links made so far: numbers each session's decision stream

  FaultStats snapshot() const { return {ops.load(), injected_errors.load(), thrown.load(), delayed.load()}; }
};

}  // namespace epd::transport

#pragma once
// Load figures a role publishes; the membership actor copies them into every HEARTBEAT.
#include <atomic>
#include <cstdint>

namespace epd::actors {

struct LoadGauge {
  std::atomic<uint32_t> free_kv_pages{0};
  std::atomic<uint32_t> total_kv_pages{0};
  std::atomic<uint32_t> free_slots{0};
  std::atomic<uint32_t> total_slots{0};
  std::atomic<uint32_t> active_rooms{0};
  std::atomic<bool> healthy{true};
  // Failure counters since start (transfer workers and their supervisor write them).
  std::atomic<uint64_t> worker_restarts{0};    // transfer workers restarted after a crash
  std::atomic<uint64_t> transfer_retries{0};   // writes retried once on a fresh session
  std::atomic<uint64_t> transfer_failures{0};  // jobs failed after the retry (room failed)
  std::atomic<uint64_t> sessions_recycled{0};  // sessions closed for a high failure rate
};

}  // namespace epd::actors

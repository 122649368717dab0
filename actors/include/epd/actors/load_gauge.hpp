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
};

}  // namespace epd::actors

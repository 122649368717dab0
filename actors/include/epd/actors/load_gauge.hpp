#pragma once
// Load figures a role publishes; the membership actor copies them into every HEARTBEAT.
#include <atomic>
#include <cstdint>

#include "epd/protocol/messages.hpp"

namespace epd::actors {

// Staging figures (docs/staging.md); written by the role, read by the membership actor.
struct StagingGauge {
  std::atomic<uint64_t> ring_bytes{0}, ring_used{0}, ring_peak{0}, rounds{0}, chunks{0}, waits{0},
      watermarks{0}, rejected{0}, oversized{0}, source_slots{0}, source_slots_free{0};
  std::atomic<bool> active{false};

  void note_ring_use(uint64_t used) {
    ring_used = used;
    for (uint64_t peak = ring_peak.load(); used > peak && !ring_peak.compare_exchange_weak(peak, used);) {
    }
  }  // this instance stages (has a ring, or has staged or refused anything)

  // Called once per heartbeat: ring_peak is the highest use since the previous heartbeat (an occupancy
  // timeline), so it restarts from the current use.
  protocol::StagingStats take_snapshot() {
    return {ring_bytes.load(),   ring_used.load(),        ring_peak.exchange(ring_used.load()),
            rounds.load(),       chunks.load(),           waits.load(),
            watermarks.load(),   rejected.load(),         oversized.load(),
            source_slots.load(), source_slots_free.load()};
  }
};

struct LoadGauge {
  std::atomic<uint32_t> free_kv_pages{0};
  std::atomic<uint32_t> total_kv_pages{0};
  std::atomic<uint32_t> free_slots{0};
  std::atomic<uint32_t> total_slots{0};
  std::atomic<uint32_t> active_rooms{0};
  // Transfer jobs of ours still writing into a peer's memory: a rejoin waits for 0 before it says HELLO as a
  // new incarnation (which tells peers that the old one writes nothing any more).
  std::atomic<uint32_t> writes_in_flight{0};
  std::atomic<bool> healthy{true};
  // Failure counters since start (transfer workers and their supervisor write them).
  std::atomic<uint64_t> worker_restarts{0};    // transfer workers restarted after a crash
  std::atomic<uint64_t> transfer_retries{0};   // writes retried once on a fresh session
  std::atomic<uint64_t> transfer_failures{0};  // jobs failed after the retry (room failed)
  std::atomic<uint64_t> sessions_recycled{0};  // sessions closed for a high failure rate
  std::atomic<uint32_t> quarantined_pages{0};  // decode: pages held for writers that may still write
  StagingGauge staging;
};

}  // namespace epd::actors

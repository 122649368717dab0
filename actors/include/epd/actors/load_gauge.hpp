#pragma once
// Load figures a role publishes; the membership actor copies them into every HEARTBEAT.
#include <array>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <optional>

#include "epd/protocol/messages.hpp"

namespace epd::actors {

// Staging figures (docs/staging.md); written by the role, read by the membership actor.
struct StagingGauge {
  std::atomic<uint64_t> ring_bytes{0}, ring_used{0}, ring_peak{0}, rounds{0}, chunks{0}, waits{0},
      watermarks{0}, rejected{0}, oversized{0}, source_slots{0}, source_slots_free{0};
  std::atomic<bool> active{false};  // this instance stages (has a ring, or has staged or refused anything)

  void note_ring_use(uint64_t used) {
    ring_used = used;
    for (uint64_t peak = ring_peak.load(); used > peak && !ring_peak.compare_exchange_weak(peak, used);) {
    }
  }

  // Called once per heartbeat: ring_peak is the highest use since the previous heartbeat (an occupancy
  // timeline), so it restarts from the current use.
  protocol::StagingStats take_snapshot() {
    return {ring_bytes.load(),   ring_used.load(),        ring_peak.exchange(ring_used.load()),
            rounds.load(),       chunks.load(),           waits.load(),
            watermarks.load(),   rejected.load(),         oversized.load(),
            source_slots.load(), source_slots_free.load()};
  }
};

// Rooms by the role's own phases (prefill: gathering, computing, ...), exported as epd_rooms{state}. Not in
// heartbeats. The role declares its phases once, before its first publish; a scrape on another thread reads
// only what `declared` says is there.
class RoomPhaseGauge {
 public:
  static constexpr size_t kMaxPhases = 8;
  void declare(std::initializer_list<const char*> names) {
    size_t n = 0;
    for (const char* name : names)
      if (n < kMaxPhases) names_[n++] = name;
    declared_.store(n, std::memory_order_release);
  }
  // counts[i] rooms are in phase i, in declaration order.
  template <size_t N>
  void publish(const std::array<uint32_t, N>& counts) {
    static_assert(N <= kMaxPhases);
    for (size_t i = 0; i < N; ++i) counts_[i].store(counts[i], std::memory_order_relaxed);
  }
  size_t declared() const { return declared_.load(std::memory_order_acquire); }
  const char* name(size_t i) const { return names_[i]; }
  uint32_t count(size_t i) const { return counts_[i].load(std::memory_order_relaxed); }

 private:
  std::array<const char*, kMaxPhases> names_{};
  std::array<std::atomic<uint32_t>, kMaxPhases> counts_{};
  std::atomic<size_t> declared_{0};
};

// The role's side of protocol::LoadReport: the same figures, each an atomic that roles, transfer workers and
// their supervisor write from their own threads (`ctx.load->free_kv_pages = n`).
struct LoadGauge : protocol::BasicLoadReport<std::atomic, StagingGauge> {
  // Transfer jobs of ours still writing into a peer's memory: a rejoin waits for 0 before it says HELLO as a
  // new incarnation (which tells peers that the old one writes nothing any more). Not reported.
  std::atomic<uint32_t> writes_in_flight{0};
  RoomPhaseGauge room_phases;

  // The figures as one LoadReport, for a HEARTBEAT. Takes the staging snapshot (which restarts ring_peak).
  protocol::LoadReport snapshot();
};

}  // namespace epd::actors

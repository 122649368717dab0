#pragma once
// One timer for all of a role's deadlines, set for the earliest. A delayed message per room stayed in CAF's
// clock for the whole timeout after its room ended (~270 bytes each: timeout x the room rate of memory).
#include <caf/all.hpp>
#include <chrono>
#include <optional>

#include "epd/actors/caf_types.hpp"

namespace epd::actors::kernel {

class DeadlineTimer {
 public:
  using clock = std::chrono::steady_clock;
  // Deadlines are read from the actor system's clock: steady_clock in production, the test coordinator's
  // simulated clock in the deterministic role tests (tests/actors), where delayed messages fire on it too.
  static clock::time_point now(const caf::local_actor* self) { return self->clock().now(); }
  // Sends `timeout_atom` to `self` at `due`, unless a timeout is already pending (it re-arms when it fires).
  void arm(caf::event_based_actor* self, std::optional<clock::time_point> due) {
    if (armed_ || !due) return;
    armed_ = true;
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(*due - now(self));
    self->delayed_send(self, std::max(wait, std::chrono::milliseconds(0)), timeout_atom::value);
  }
  // Call first on timeout_atom.
  void fired() { armed_ = false; }
  bool armed() const { return armed_; }

 private:
  bool armed_ = false;
};

// The earliest of `deadline(room)` over the rooms for which it is set.
template <class Table, class Deadline>
std::optional<DeadlineTimer::clock::time_point> earliest(const Table& table, Deadline deadline) {
  std::optional<DeadlineTimer::clock::time_point> due;
  for (const auto& [id, room] : table)
    if (auto d = deadline(room); d && (!due || *d < *due)) due = d;
  return due;
}

}  // namespace epd::actors::kernel

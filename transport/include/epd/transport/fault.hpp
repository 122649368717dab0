#pragma once
// Observable side of the fault backend: its decision function (so tests can predict exactly which ops fail
// for a seed) and its counters.
#include <cstdint>

namespace epd::transport {

// Whether op number `op_index` (0-based, counted per session) fails under `error_rate` with `seed`.
// Stateless, so the outcome does not depend on thread interleaving.
bool fault_injects(uint64_t seed, uint64_t op_index, double error_rate);
// The seed the engine's n-th fault session (0-based) draws with: the configured seed for the first, a
// mix of both for later ones (a fresh session must not replay its predecessor's faults).
uint64_t fault_session_seed(uint64_t seed, uint64_t session_index);

struct FaultStats {
  uint64_t ops = 0;              // ops that went through a fault link
  uint64_t injected_errors = 0;  // ops chosen to fail (their batches failed with injected_fault)
  uint64_t thrown = 0;           // submits that threw (throw_after_ops)
  uint64_t delayed = 0;          // batches whose completion was delayed
};

}  // namespace epd::transport

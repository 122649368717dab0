#pragma once
// Engine configuration. Defaults are sane for a single host; roles fill these from their TOML section.
// Backend-specific settings are not fields here: they travel as opaque `options` that each backend parses
// itself (its README lists its keys).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "epd/transport/backend_options.hpp"
#include "epd/transport/types.hpp"

namespace epd::transport {

struct FaultConfig {
  bool enabled = false;
  double error_rate = 0.0;  // probability that a write op fails with injected_fault (no bytes moved)
  uint32_t delay_us = 0;    // added before each batch completes
  uint32_t stall_us = 0;    // held before any byte of a batch moves: a writer that froze and woke up late
  // > 0: the Nth submitted op of a session throws std::runtime_error in the submitting thread.
  uint64_t throw_after_ops = 0;
  // > 0: at most this many of those throws per engine, so a test's crashes are bounded.
  uint64_t throw_max = 0;
  uint64_t seed = 1;
};

// Names of the backends an engine offers by default: every registered one that needs no device.
std::vector<std::string> default_offer();

struct EngineConfig {
  std::string instance_id = "engine";
  std::string host_id;             // "" = this host's id (hostname + boot id); equal ids => shm possible
  uint64_t incarnation = 0;        // 0 = derive a fresh one (time + random)
  std::string host = "127.0.0.1";  // address backends bind and advertise (tcp listener, rdma handshake)
  std::vector<std::string> offer = default_offer();  // backend names this engine serves to peers
  // Outgoing sessions use exactly this backend (error if the peer lacks it).
  std::optional<std::string> force;
  BackendOptions options;  // each backend's own keys (tcp_lanes, rdma_device, ...)
  FaultConfig fault;       // wraps every outgoing session's link when enabled
};

}  // namespace epd::transport

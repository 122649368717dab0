#pragma once
// Engine configuration. Defaults are sane for a single host; roles fill these from their TOML section.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "epd/transport/types.hpp"

namespace epd::transport {

struct TcpConfig {
  std::string listen_host = "127.0.0.1";  // address the receiver listens on and advertises
  uint16_t listen_port = 0;               // 0: pick a free port
  uint32_t lanes = 4;                     // connections per peer session
  uint64_t slice_bytes = 1u << 20;        // large writes are cut into slices spread over the lanes
  uint32_t max_inflight_slices = 64;      // per lane, bounds memory and latency
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds op_timeout{5000};  // no progress for this long => batch fails (retryable)
};

struct FaultConfig {
  bool enabled = false;
  double error_rate = 0.0;  // probability that a write op fails with injected_fault (no bytes moved)
  uint32_t delay_us = 0;    // added before each batch completes
  uint32_t stall_us = 0;    // held before any byte of a batch moves: a writer that froze and woke up late
  uint64_t throw_after_ops =
      0;  // > 0: the Nth submitted op throws std::runtime_error in the submitting thread
  uint64_t seed = 1;
};

struct RdmaConfig {
  std::string device;  // "" = pick by routability
  int gid_index = -1;  // -1 = pick the RoCE v2 IPv4-mapped GID of the interface
  uint8_t port = 1;
  uint32_t qps_per_peer = 2;
  uint64_t slice_bytes = 1u << 20;
  uint32_t max_outstanding_wr = 64;
  std::string handshake_host = "127.0.0.1";
  uint16_t handshake_port = 0;
  std::chrono::milliseconds op_timeout{5000};
};

struct EngineConfig {
  std::string instance_id = "engine";
  std::string host_id;       // "" = this host's id (hostname + boot id); equal ids => shm possible
  uint64_t incarnation = 0;  // 0 = derive a fresh one (time + random)
  std::vector<BackendKind> offer{BackendKind::shm, BackendKind::tcp};  // what this engine serves to peers
  std::optional<BackendKind>
      force;  // outgoing sessions use exactly this backend (error if the peer lacks it)
  TcpConfig tcp;
  RdmaConfig rdma;
  FaultConfig fault;  // wraps every outgoing session's backend when enabled
};

}  // namespace epd::transport

#pragma once
// The rdma backend's settings and the option keys it owns (README.md). Compiled in every build, so configs
// naming rdma keys parse the same with or without ibverbs.
#include <chrono>
#include <cstdint>
#include <string>

#include "epd/transport/backend_options.hpp"

namespace epd::transport::rdma {

struct RdmaConfig {
  std::string device;  // "" = pick by routability
  int gid_index = -1;  // -1 = pick the RoCE v2 IPv4-mapped GID of the interface
  uint8_t port = 1;
  uint32_t qps_per_peer = 2;
  uint64_t slice_bytes = 1u << 20;
  uint32_t max_outstanding_wr = 64;
  std::string handshake_host = "127.0.0.1";  // EngineConfig::host
  uint16_t handshake_port = 0;
  std::chrono::milliseconds op_timeout{5000};
};

// Reads the rdma_* keys of `options`; errors name the key.
Result<RdmaConfig> parse_rdma_options(const BackendOptions& options, const std::string& host);

}  // namespace epd::transport::rdma

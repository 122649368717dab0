#pragma once
// The tcp backend's settings and the option keys it owns (README.md lists them with their defaults).
#include <chrono>
#include <cstdint>
#include <string>

#include "epd/transport/backend_options.hpp"

namespace epd::transport::tcp {

struct TcpConfig {
  std::string listen_host = "127.0.0.1";  // listens on and advertises this (EngineConfig::host)
  uint16_t listen_port = 0;               // 0: pick a free port
  uint32_t lanes = 4;                     // connections per peer session
  uint64_t slice_bytes = 1u << 20;        // large writes are cut into slices spread over the lanes
  uint32_t max_inflight_slices = 64;      // per lane, bounds memory and latency
  std::chrono::milliseconds connect_timeout{2000};
  std::chrono::milliseconds op_timeout{5000};  // no progress for this long => batch fails (retryable)
};

// Reads the tcp_* keys (and connect_timeout_ms) of `options`; errors name the key.
Result<TcpConfig> parse_tcp_options(const BackendOptions& options, const std::string& host);

}  // namespace epd::transport::tcp

#pragma once
// "HOST:PORT" addresses of HTTP listeners (the router's `http`, every instance's `metrics`).
#include <cstdint>
#include <string>
#include <string_view>

#include "epd/protocol/result.hpp"

namespace epd::config {

struct HostPort {
  std::string host;
  uint16_t port = 0;  // 0: any free port
  std::string text() const { return host + ":" + std::to_string(port); }
};

// config_error naming `key` and `where` unless `text` is HOST:PORT with a non-empty host and a port 0..65535.
protocol::Result<HostPort> parse_host_port(std::string_view text, std::string_view key,
                                           std::string_view where);

}  // namespace epd::config

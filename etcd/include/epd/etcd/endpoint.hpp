#pragma once
// An etcd client URL, http://HOST:PORT (the client port etcd serves its JSON gateway on).
#include <cstdint>
#include <string>
#include <string_view>

#include "epd/protocol/result.hpp"

namespace epd::etcd {

struct Endpoint {
  std::string host;
  uint16_t port = 0;
  std::string text() const { return "http://" + host + ":" + std::to_string(port); }
};

// http://HOST:PORT with an optional trailing '/'; https and paths are refused (config_error, naming `url`).
protocol::Result<Endpoint> parse_endpoint(std::string_view url);

}  // namespace epd::etcd

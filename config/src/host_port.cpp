#include "epd/config/host_port.hpp"

#include <charconv>

namespace epd::config {

protocol::Result<HostPort> parse_host_port(std::string_view text, std::string_view key,
                                           std::string_view where) {
  const auto colon = text.rfind(':');
  uint32_t port = 0;
  bool ok = colon != std::string_view::npos && colon > 0 && colon + 1 < text.size();
  if (ok) {
    const char* first = text.data() + colon + 1;
    const char* last = text.data() + text.size();
    auto [end, ec] = std::from_chars(first, last, port);
    ok = ec == std::errc{} && end == last && port <= 65535;
  }
  if (!ok)
    return protocol::make_error(protocol::ErrorCode::config_error,
                                std::string(where) + ": key '" + std::string(key) +
                                    "' must be HOST:PORT, got '" + std::string(text) + "'");
  return HostPort{std::string(text.substr(0, colon)), uint16_t(port)};
}

}  // namespace epd::config

#pragma once
// tcp's connection info, published as descriptor.backends["tcp"] (msgpack map; README.md).
#include <string>

namespace epd::transport::tcp {

inline constexpr const char* kName = "tcp";

struct TcpInfo {
  std::string endpoint;  // "host:port" of the receiver's listener

  bool operator==(const TcpInfo&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("endpoint", s.endpoint);
  }
};

}  // namespace epd::transport::tcp

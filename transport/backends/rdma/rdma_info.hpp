#pragma once
// rdma's connection info, published as descriptor.backends["rdma"] (msgpack map; README.md).
#include <cstdint>
#include <string>
#include <vector>

namespace epd::transport::rdma {

inline constexpr const char* kName = "rdma";

struct RdmaRegionInfo {
  uint32_t id = 0;    // RegionDesc::id
  uint32_t rkey = 0;  // remote key of the region's registration

  bool operator==(const RdmaRegionInfo&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("id", s.id);
    v.req("rkey", s.rkey);
  }
};

struct RdmaInfo {
  std::string device;
  uint8_t port = 1;
  uint32_t gid_index = 0;
  std::vector<uint8_t> gid;        // 16 bytes
  std::string handshake_endpoint;  // host:port where QP parameters are exchanged
  std::vector<RdmaRegionInfo> regions;

  bool operator==(const RdmaInfo&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("device", s.device);
    v.req("port", s.port);
    v.req("gid_index", s.gid_index);
    v.req("gid", s.gid);
    v.req("handshake_endpoint", s.handshake_endpoint);
    v.req("regions", s.regions);
  }
};

}  // namespace epd::transport::rdma

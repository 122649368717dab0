#pragma once
// shm's connection info, published as descriptor.backends["shm"] (msgpack map; README.md).
#include <cstdint>
#include <vector>

namespace epd::transport::shm {

inline constexpr const char* kName = "shm";

struct ShmRegionInfo {
  uint32_t id = 0;  // RegionDesc::id
  int32_t fd = -1;  // memfd number in the owner process (same-host peers open /proc/<pid>/fd/<fd>)

  bool operator==(const ShmRegionInfo&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("id", s.id);
    v.req("fd", s.fd);
  }
};

struct ShmInfo {
  int32_t pid = 0;          // owner pid
  int32_t control_fd = -1;  // memfd of the owner's control page (token check)
  std::vector<ShmRegionInfo> regions;

  bool operator==(const ShmInfo&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("pid", s.pid);
    v.req("control_fd", s.control_fd);
    v.req("regions", s.regions);
  }
};

}  // namespace epd::transport::shm

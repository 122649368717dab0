#pragma once
// A Region is memory peers may write into: allocated by the engine from a memfd (so a same-host peer can map
// it and an RDMA device can register it), mapped once for the engine's lifetime.
#include <cstdint>
#include <string>

namespace epd::transport {

struct Region {
  uint32_t id = 0;
  std::string name;
  uint8_t* base = nullptr;
  uint64_t length = 0;
  int fd = -1;        // memfd owning the pages
  uint32_t lkey = 0;  // RDMA local key, 0 when not registered
  uint32_t rkey = 0;  // RDMA remote key, 0 when not registered or fenced (then only per-grant keys exist)
  uint64_t fence_unit = 0;  // > 0: writes need a grant (fence.hpp), in units of this many bytes

  uint64_t addr() const { return reinterpret_cast<uint64_t>(base); }
  // Overflow-safe: [addr, addr+len) lies inside this region.
  bool contains(uint64_t addr, uint64_t len) const {
    const uint64_t b = this->addr();
    return addr >= b && len <= length && addr - b <= length - len;
  }
};

}  // namespace epd::transport

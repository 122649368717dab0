#pragma once
// SegmentDescriptor: everything a peer needs to write into this process's registered memory.
// Built by the transport engine, carried inside HELLO, decoded by the peer's engine.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace epd::protocol {

struct RegionDesc {
  uint32_t id = 0;
  std::string name;
  uint64_t base = 0;    // address in the owner's address space; writes name remote addresses in this space
  uint64_t length = 0;
  int32_t shm_fd = -1;  // memfd number in the owner process (same-host peers open /proc/<pid>/fd/<fd>)
  uint32_t rkey = 0;    // RDMA remote key (0 when the region is not registered with a device)

  bool operator==(const RegionDesc&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("id", s.id);
    v.opt("name", s.name);
    v.req("base", s.base);
    v.req("length", s.length);
    v.opt("shm_fd", s.shm_fd);
    v.opt("rkey", s.rkey);
  }
};

struct RdmaOffer {
  std::string device;
  uint8_t port = 1;
  uint32_t gid_index = 0;
  std::vector<uint8_t> gid;  // 16 bytes
  std::string handshake_endpoint;  // host:port where QP parameters are exchanged

  bool operator==(const RdmaOffer&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("device", s.device);
    v.req("port", s.port);
    v.req("gid_index", s.gid_index);
    v.req("gid", s.gid);
    v.req("handshake_endpoint", s.handshake_endpoint);
  }
};

struct SegmentDescriptor {
  std::string instance_id;
  std::string host_id;       // same host_id => shared memory is possible
  uint64_t incarnation = 0;  // changes on every restart of the owner
  uint64_t token = 0;        // random per engine; every write must present it
  int32_t pid = 0;           // owner pid, for shm (0: shm not offered)
  int32_t shm_control_fd = -1;  // memfd of the owner's shm control page (token check), -1: shm not offered
  std::string tcp_endpoint;  // "host:port" of the tcp backend's listener ("" = not offered)
  std::optional<RdmaOffer> rdma;
  std::vector<RegionDesc> regions;

  bool operator==(const SegmentDescriptor&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("instance_id", s.instance_id);
    v.req("host_id", s.host_id);
    v.req("incarnation", s.incarnation);
    v.req("token", s.token);
    v.opt("pid", s.pid);
    v.opt("shm_control_fd", s.shm_control_fd);
    v.opt("tcp_endpoint", s.tcp_endpoint);
    v.opt("rdma", s.rdma);
    v.req("regions", s.regions);
  }
};

}  // namespace epd::protocol

#pragma once
// SegmentDescriptor: everything a peer needs to write into this process's registered memory.
// Built by the transport engine, carried inside HELLO, decoded by the peer's engine.
// Backend-agnostic: each transfer backend publishes its own connection info as an opaque blob under its name
// (transport/backends/<name>/README.md describes each blob); this layer never looks inside.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace epd::protocol {

// The format of SegmentDescriptor::backends this build writes and reads (0: the peer published none).
inline constexpr uint32_t kBackendInfoVersion = 1;

// Nested in SegmentDescriptor.
struct RegionDesc {
  uint32_t id = 0;
  std::string name;
  uint64_t base = 0;  // address in the owner's address space; writes name remote addresses in this space
  uint64_t length = 0;

  bool operator==(const RegionDesc&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("id", s.id);
    v.opt("name", s.name);
    v.req("base", s.base);
    v.req("length", s.length);
  }
};

// Nested in HELLO and PEERS; built by the transport engine.
struct SegmentDescriptor {
  std::string instance_id;
  std::string host_id;       // same host_id => shared memory is possible
  uint64_t incarnation = 0;  // changes on every restart of the owner
  uint64_t token = 0;        // random per engine; every write must present it
  std::vector<RegionDesc> regions;
  uint32_t backends_version = 0;  // format of `backends` (kBackendInfoVersion); 0: none published
  std::map<std::string, std::vector<uint8_t>> backends;  // offered backend name -> its opaque connection info

  bool operator==(const SegmentDescriptor&) const = default;
  template <class S, class V>
  static void fields(S& s, V& v) {
    v.req("instance_id", s.instance_id);
    v.req("host_id", s.host_id);
    v.req("incarnation", s.incarnation);
    v.req("token", s.token);
    v.req("regions", s.regions);
    v.opt("backends_version", s.backends_version);
    v.opt("backends", s.backends);
  }
};

}  // namespace epd::protocol

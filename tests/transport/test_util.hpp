#pragma once
// Shared pieces of the transport tests: a target engine either in this process or in a child process, an
// initiator engine forced onto one backend, and byte helpers.
#include <xxhash.h>

#include <memory>
#include <optional>
#include <random>
#include <string>

#include "epd/transport/backend_registry.hpp"
#include "epd/transport/engine.hpp"
#include "peer_process.hpp"

namespace epd::test {

using namespace epd::transport;

class Target {
 public:
  virtual ~Target() = default;
  virtual bool ok() const = 0;
  virtual const protocol::SegmentDescriptor& descriptor() const = 0;
  virtual std::optional<uint64_t> checksum(uint64_t addr, uint64_t len) = 0;
  virtual bool fill(uint64_t addr, uint64_t len, uint8_t byte) = 0;
  const protocol::RegionDesc& region(size_t i) const { return descriptor().regions.at(i); }
};

class LocalTarget final : public Target {
 public:
  LocalTarget(const std::string& offer, int regions, uint64_t bytes, EngineConfig config = {});
  bool ok() const override { return engine_ != nullptr; }
  const protocol::SegmentDescriptor& descriptor() const override { return desc_; }
  std::optional<uint64_t> checksum(uint64_t addr, uint64_t len) override {
    return XXH64(reinterpret_cast<const void*>(addr), len, 0);
  }
  bool fill(uint64_t addr, uint64_t len, uint8_t byte) override;
  Engine& engine() { return *engine_; }

 private:
  std::unique_ptr<Engine> engine_;
  protocol::SegmentDescriptor desc_;
};

class ChildTarget final : public Target {
 public:
  ChildTarget(const std::string& offer, int regions, uint64_t bytes)
      : peer_("child", offer, regions, bytes) {}
  bool ok() const override { return peer_.started(); }
  const protocol::SegmentDescriptor& descriptor() const override { return peer_.descriptor(); }
  std::optional<uint64_t> checksum(uint64_t addr, uint64_t len) override { return peer_.checksum(addr, len); }
  bool fill(uint64_t addr, uint64_t len, uint8_t byte) override { return peer_.fill(addr, len, byte); }
  PeerProcess& process() { return peer_; }

 private:
  PeerProcess peer_;
};

std::unique_ptr<Target> make_target(bool child, const std::string& offer, int regions, uint64_t bytes);

// An initiator engine that uses exactly `backend` for its sessions, with one source region of `src_bytes`.
struct Initiator {
  std::unique_ptr<Engine> engine;
  Region src;
};
Initiator make_initiator(const std::string& backend, uint64_t src_bytes, EngineConfig config = {});

// The registered backends the conformance cases run on: those that need no device (every host), and those
// that do (run inside the Soft-RoCE VM, tag [verbs]). A newly registered backend is covered without edits.
std::vector<std::string> host_backends();
std::vector<std::string> device_backends();

void fill_random(uint8_t* p, uint64_t len, uint64_t seed);
inline uint64_t xxh(const uint8_t* p, uint64_t len) {
  return XXH64(p, len, 0);
}

}  // namespace epd::test

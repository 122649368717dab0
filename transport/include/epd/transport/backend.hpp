#pragma once
// What a backend implements. The engine validates every op before a backend sees it, so backends receive
// resolved, in-range ops; the receiving side of a backend (tcp server, rdma) still checks on its own,
// because it cannot trust the wire.
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "epd/protocol/segment.hpp"
#include "epd/transport/batch.hpp"
#include "epd/transport/region.hpp"
#include "epd/transport/types.hpp"

namespace epd::transport {

// One write after validation: source pointer and region, destination region of the peer.
struct ResolvedOp {
  const uint8_t* src = nullptr;
  uint64_t len = 0;
  uint64_t remote_addr = 0;
  const Region* local_region = nullptr;                 // for lkey
  const protocol::RegionDesc* remote_region = nullptr;  // for rkey / shm fd; owned by the session
  uint64_t fence = 0;                                   // WriteOp::fence
};

// A backend's connection to one peer (one per Session).
class Link {
 public:
  virtual ~Link() = default;
  // Starts moving the ops; must eventually complete or fail `batch` (never leave it pending forever).
  // May throw only where a fault backend is configured to.
  virtual void submit(const BatchPtr& batch, std::span<const ResolvedOp> ops) = 0;
  // Fails every outstanding batch with session_closed and releases resources. Idempotent.
  virtual void close() = 0;
  // False once the link saw an error it cannot recover from (the session should be reopened).
  virtual bool healthy() const = 0;
};

// One per backend kind per engine; owns the receiving side (listener, device) for its lifetime.
class Backend {
 public:
  virtual ~Backend() = default;
  virtual BackendKind kind() const = 0;
  // Adds this backend's offer (endpoint, device, ...) to my own descriptor.
  virtual void describe(protocol::SegmentDescriptor& self) const = 0;
  // Whether this backend can reach `peer` from `self` (e.g. shm needs the same host and a shm offer).
  virtual bool can_reach(const protocol::SegmentDescriptor& self,
                         const protocol::SegmentDescriptor& peer) const = 0;
  // A newly allocated local region (rdma registers it; others may ignore it).
  virtual Status on_region_added(Region& region) = 0;
  virtual Result<std::unique_ptr<Link>> connect(const protocol::SegmentDescriptor& peer) = 0;
};

}  // namespace epd::transport

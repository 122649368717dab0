#pragma once
// What a transfer backend implements (one folder under transport/backends/, see its README.md). The engine
// validates every op before a backend sees it, so backends receive resolved, in-range ops; the receiving side
// of a backend (tcp server, rdma) still checks on its own, because it cannot trust the wire.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "epd/protocol/segment.hpp"
#include "epd/transport/backend_options.hpp"
#include "epd/transport/batch.hpp"
#include "epd/transport/config.hpp"
#include "epd/transport/fence.hpp"
#include "epd/transport/region.hpp"
#include "epd/transport/types.hpp"

namespace epd::transport {

// One write after validation: source pointer and region, destination region of the peer.
struct ResolvedOp {
  const uint8_t* src = nullptr;
  uint64_t len = 0;
  uint64_t remote_addr = 0;
  const Region* local_region = nullptr;                 // for lkey
  const protocol::RegionDesc* remote_region = nullptr;  // the peer's region; owned by the session
  uint64_t fence = 0;                                   // WriteOp::fence
};

// A backend's connection to one peer (one per Session).
class Link {
 public:
  virtual ~Link() = default;
  // Starts moving the ops; must eventually complete or fail `batch` (never leave it pending forever).
  // May throw only where a fault link is configured to.
  virtual void submit(const BatchPtr& batch, std::span<const ResolvedOp> ops) = 0;
  // Fails every outstanding batch with session_closed and releases resources. Idempotent.
  virtual void close() = 0;
  // False once the link saw an error it cannot recover from (the session should be reopened).
  virtual bool healthy() const = 0;
};

// One per backend per engine; owns the receiving side (listener, device) for its lifetime.
class Backend {
 public:
  virtual ~Backend() = default;
  // My connection info for peers: the blob published as descriptor.backends[<name>] (format: the backend's
  // README). `regions` are the engine's regions, in id order (for per-region info such as keys or fds).
  virtual std::vector<uint8_t> connection_info(std::span<const Region* const> regions) const = 0;
  // Whether this backend can reach `peer` from `self` (e.g. shm needs the same host and a shm offer).
  virtual bool can_reach(const protocol::SegmentDescriptor& self,
                         const protocol::SegmentDescriptor& peer) const = 0;
  // A newly allocated local region (rdma registers it; others may ignore it).
  virtual Status on_region_added(Region& region) = 0;
  virtual Result<std::unique_ptr<Link>> connect(const protocol::SegmentDescriptor& peer) = 0;
  // The engine's token changed (Engine::rotate_token): from now on only `token` opens links or places
  // writes here. What a backend can still not take back (an rdma QP already connected) is its README's.
  virtual void set_token(uint64_t token) = 0;
  // `key` was revoked (or lost units to another grant) in the engine's FenceTable: whatever this backend
  // handed out under it must stop working before this returns (rdma deregisters the key's regions).
  virtual void revoke_grant(uint64_t /*key*/) {}
};

// What every backend may need to know about its engine.
struct BackendContext {
  const EngineConfig& config;  // config.host, config.options (the backend's own keys), config.instance_id
  uint64_t token = 0;          // the engine's segment token; receivers refuse writes without it
  uint64_t incarnation = 0;
  std::string host_id;
  std::shared_ptr<FenceTable> fences;  // receivers that place bytes themselves enforce it
};

// What the engine and callers may ask about a backend without naming it.
struct BackendCaps {
  bool same_host_only = false;  // reaches only peers with the same host id (shm)
  bool needs_device = false;    // starts only where a device exists (rdma); not offered by default
  // The receiver's CPU places every write (tcp): it checks the token and the write fences (fence.hpp) on
  // each one. Otherwise the writer places the bytes (shm, rdma): the token is checked when a link opens, and
  // a revoked fence stops a writer only where the backend fences_grants.
  bool fences_writes = false;
  // The writer places the bytes, but only through access the receiver grants per key and takes back on
  // revocation (rdma: a memory registration per grant): a revoked key's writes fail at the writer's NIC.
  bool fences_grants = false;
};

// A backend's registration: one per folder under transport/backends/, listed in the registry in the order
// of transport/backends/CMakeLists.txt.
struct BackendPlugin {
  std::string_view name;  // also the key of its blob in SegmentDescriptor::backends
  std::string_view summary;
  BackendCaps caps;
  int preference = 100;                       // automatic choice: the lowest that can reach the peer wins
  std::vector<std::string_view> option_keys;  // the config keys it owns (no other layer parses them)
  // Checks its own keys in `options` (ignores others): a bad value is a config_error naming the key.
  Status (*check_options)(const BackendOptions& options) = nullptr;
  // Starts the backend; nullptr when this build does not include it (e.g. rdma without ibverbs).
  Result<std::unique_ptr<Backend>> (*make)(const BackendContext& ctx) = nullptr;
  // Optional: true when the peer's own info proves its process is gone (called for same-host peers only).
  bool (*peer_gone)(const protocol::SegmentDescriptor& peer) = nullptr;
  // Optional: non-empty when figures measured against `peer` are emulation only (e.g. a software RDMA
  // device); the bench labels such rows.
  std::string (*emulation_note)(const protocol::SegmentDescriptor& peer) = nullptr;
};

// The peer's blob for `backend`, or nullptr when it publishes none (or in a format this build cannot read).
const std::vector<uint8_t>* peer_info(const protocol::SegmentDescriptor& peer, std::string_view backend);

}  // namespace epd::transport

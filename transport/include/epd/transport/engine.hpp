#pragma once
// The data plane of one process: allocates the regions peers write into, describes them to peers, opens
// sessions on peers' descriptors and moves bytes with the best backend both ends share.
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "epd/protocol/segment.hpp"
#include "epd/transport/backend.hpp"
#include "epd/transport/backend_registry.hpp"
#include "epd/transport/config.hpp"
#include "epd/transport/fault.hpp"
#include "epd/transport/fence.hpp"
#include "epd/transport/session.hpp"

namespace epd::transport {

struct FaultCounters;

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(EngineConfig config);
  // Closes every session still open, stops the backends (joins their threads), then unmaps the regions.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Allocates `bytes` (rounded up to the page size) of zeroed, shareable, registered memory.
  // The region lives until the engine is destroyed. Peers see it in descriptors taken after this call.
  // fence_unit > 0 fences the region in units of that many bytes (fence.hpp): writes need a granted key.
  Result<Region> allocate(std::string name, uint64_t bytes, uint64_t fence_unit = 0);
  // My regions; the pointers stay valid for the engine's lifetime.
  std::vector<Region> regions() const;
  // Finds the local region holding [addr, addr+len).
  const Region* find_local(uint64_t addr, uint64_t len) const;

  // Everything a peer needs to write into my regions (send it in HELLO).
  protocol::SegmentDescriptor descriptor() const;
  const EngineConfig& config() const { return config_; }
  uint64_t incarnation() const { return incarnation_; }
  uint64_t token() const { return token_.load(std::memory_order_acquire); }
  // A fresh random segment token, handed to every backend before it returns: writers holding the old one are
  // refused (tcp: every frame; shm: every batch; rdma: new handshakes). Descriptors taken afterwards carry
  // the new token; peers must be given one. Returns the new token.
  uint64_t rotate_token();
  const std::string& host_id() const { return host_id_; }
  // Backends this engine offers (after backends that failed to start were dropped, with a log line).
  std::vector<std::string> offered() const;

  // Opens a session on `peer`: picks the started backend of lowest preference that can reach the peer (shm
  // on one host, else rdma, else tcp), unless config.force names one. Errors: no_common_backend,
  // peer_unreachable, bad_token, ...
  Result<SessionPtr> open_session(const protocol::SegmentDescriptor& peer);
  // Which backend open_session would pick (for logs and tests).
  Result<std::string> choose_backend(const protocol::SegmentDescriptor& peer) const;

  // Write fences of the regions allocated with a fence unit (fence.hpp): grant a key for `units` of the
  // region starting at `base` before a writer is told about them; revoke it before they are reused (false:
  // a write under it is still landing, ask again).
  uint64_t grant_writes(uint64_t region_base, std::span<const uint64_t> units, uint64_t key = 0);
  // Also makes every backend take back what it handed out under the key (rdma: deregisters its regions).
  bool revoke_writes(uint64_t key);
  FenceStats fence_stats() const { return fences_->stats(); }
  // True when every way `writer` could write into this engine's memory is refused once its key is revoked:
  // only backends that fence writes (tcp: each frame at our receiver; rdma: the key's memory registrations
  // are gone, so its NIC's writes fail) are offered to it. False when it could map our memory (shm, same
  // host): then only the writer's own word (or its death) says that it stopped.
  bool fences_writes_from(const protocol::SegmentDescriptor& writer) const;
  // True when `writer` certainly writes nothing any more because its process is gone (same host only: a
  // backend's info proves it, e.g. shm's pid; a writer on another host is never known gone here).
  bool writer_gone(const protocol::SegmentDescriptor& writer) const;

  // Totals of every fault link this engine created (all zero unless config.fault.enabled).
  FaultStats fault_stats() const;

 private:
  explicit Engine(EngineConfig config);
  Status start();

  EngineConfig config_;
  uint64_t incarnation_ = 0;
  std::atomic<uint64_t> token_{0};
  std::string host_id_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Region>> regions_;
  struct Started {
    const BackendPlugin* plugin = nullptr;
    std::unique_ptr<Backend> backend;
    bool offered = false;
  };
  std::vector<Started> backends_;  // in preference order
  const Started* started(std::string_view name) const;
  std::vector<std::weak_ptr<Session>> sessions_;  // closed by the destructor
  std::shared_ptr<FaultCounters> fault_counters_;
  std::shared_ptr<FenceTable> fences_ = std::make_shared<FenceTable>();
  std::atomic<uint64_t> next_batch_id_{1};
};

}  // namespace epd::transport

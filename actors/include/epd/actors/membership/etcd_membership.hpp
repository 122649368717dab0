#pragma once
// Membership kept in etcd (registry = "etcd"), in place of the embedded registry and its client: every
// instance registers its record under a lease and watches every other record, or (etcd_watch = "routers")
// only routers watch and pass the records on to the others in RECORDS (docs/architecture.md, "Membership in
// etcd"). The actor turns what the watch sees into the same PeerDirectory updates and
// PeerChanges the embedded registry's PEERS produce, so roles do not know which backend runs. Load stays
// off etcd: each instance sends HEARTBEATs with its LoadReport to every router it sees, and a router keeps
// its RegistryView (placement, /v1/instances) from the records plus those heartbeats.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epd/actors/bridge.hpp"
#include "epd/actors/load_gauge.hpp"
#include "epd/actors/membership/registry_view.hpp"
#include "epd/actors/process_metrics.hpp"
#include "epd/etcd/etcd_client.hpp"
#include "epd/etcd/lease_keeper.hpp"
#include "epd/transport/engine.hpp"

namespace epd::actors {

struct EtcdMembershipConfig {
  std::vector<std::string> endpoints;  // http://HOST:PORT
  std::string prefix;                  // "/epd/<name>/"
  std::chrono::milliseconds lease_ttl{5000};
  std::chrono::milliseconds request_timeout{2000};  // one etcd call
  std::chrono::milliseconds heartbeat_interval{500};
  uint32_t heartbeat_misses = 3;  // a router stops placing on an instance silent this long
  // This instance's record (its load goes in heartbeats). Its identity is what peers check: at least
  // protocol::current_protocol_identity(); records of builds incompatible with it are refused.
  protocol::PeerInfo self;
  transport::Engine* engine = nullptr;         // write-fence figures go into heartbeats (may be null)
  std::shared_ptr<MembershipMetrics> metrics;  // may be null
  std::shared_ptr<etcd::Traffic> traffic{};    // what etcd's answers cost (may be null; epd-bench membership)
  // Keeps our record alive in etcd. Null: one of our own (a thread, a keep-alive stream); epd-bench
  // membership shares one among the simulated instances of a process, as one client's leases share a stream.
  std::shared_ptr<etcd::LeaseKeeper> keeper{};
  // etcd_watch = "routers": only routers watch etcd; they send every other instance RECORDS, gathering the
  // events of `records_window` after a send into the next one. While events keep coming (a start, a rolling
  // restart) each window is twice the last, up to `records_window_max`; a lone event goes at once.
  bool routers_watch = false;
  std::chrono::milliseconds records_window{50};
  std::chrono::milliseconds records_window_max{400};
  std::shared_ptr<std::atomic<uint64_t>>
      records_bytes{};  // RECORDS bytes a router sent (may be null; benches)
};

// Stops the etcd threads (revoking our lease, so our record goes at once) and the actor.
class EtcdMembership {
 public:
  virtual ~EtcdMembership() = default;
  virtual caf::actor actor() const = 0;
  virtual void stop() = 0;
  // Stops them without revoking the lease, as a kill -9 leaves it: our record stays in etcd until the lease
  // expires (epd-bench membership simulates crashes with it).
  virtual void abandon() = 0;
};

// `view`: set in a router (filled from records + heartbeats), null elsewhere.
protocol::Result<std::unique_ptr<EtcdMembership>> start_etcd_membership(
    caf::actor_system& system, BridgePtr bridge, EtcdMembershipConfig config, std::shared_ptr<LoadGauge> load,
    caf::actor role, std::shared_ptr<RegistryView> view);

}  // namespace epd::actors

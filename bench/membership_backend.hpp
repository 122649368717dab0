#pragma once
// The two sides of membership that `epd-bench membership` swaps per backend: where membership lives (the
// embedded registry in a child process, or a real etcd) and what each simulated instance runs to take
// part in it (the registry client, or the etcd membership actor).
#include <sys/types.h>

#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "epd/actors/bridge.hpp"
#include "epd/actors/membership/registry_view.hpp"

namespace epd::bench {

struct MembershipOptions {
  int instances = 300;
  int changes = 10;                         // kills, then as many adds
  std::chrono::milliseconds interval{500};  // the clusters' default heartbeat_interval_ms
  uint32_t misses = 3;
  std::chrono::milliseconds lease_ttl{2000};  // etcd: short, so a killed instance's record goes soon
  std::vector<std::string> backends{"router-full", "router", "etcd"};
  // The simulated instances' control channels share one ZeroMQ context and one reading thread (a
  // ChannelHub); false: each has its own, as a real process does (the simulation before, for A/B runs).
  bool shared_threads = true;
};

// One simulated instance's part in membership.
class MemberLink {
 public:
  virtual ~MemberLink() = default;
  // As a kill -9 leaves it: nothing said to anyone, nothing revoked. The caller stops the bridge.
  virtual void crash() = 0;
};

class RegistryBackend {
 public:
  virtual ~RegistryBackend() = default;
  virtual std::string describe() const = 0;
  virtual bool start(const MembershipOptions& opt) = 0;
  virtual double cpu_seconds() const = 0;  // the registry's (or etcd's) CPU so far, user + system
  virtual void stop() = 0;

  // How many simulated instances are routers, keeping a placement view from heartbeats. The embedded
  // registry keeps the only view itself, in its own process: 0.
  virtual int routers() const { return 0; }
  // Starts the membership of one instance; `view` is set for routers.
  virtual std::unique_ptr<MemberLink> join(caf::actor_system& system, actors::BridgePtr bridge,
                                           const std::string& role,
                                           std::shared_ptr<actors::RegistryView> view) = 0;
  // Bytes the instances received about membership, when not through their bridges (etcd: its HTTP
  // answers); nullopt: what the bridges received (PEERS).
  virtual std::optional<uint64_t> bytes_to_instances() const { return std::nullopt; }
  // How long a kill may take until every directory agrees.
  virtual std::chrono::milliseconds kill_limit(const MembershipOptions& o) const {
    return o.interval * (o.misses + 4);
  }
  // The backend's own counters (etcd: writes, proposals, lease renewals), as {name, value}; the bench
  // prints their rate over the heartbeats-only window.
  virtual std::vector<std::pair<std::string, double>> counters() const { return {}; }
};

std::unique_ptr<RegistryBackend> make_embedded_backend(bool full_lists);
// `routers_watch`: etcd_watch = "routers" (only the two routers watch; they send the others RECORDS).
std::unique_ptr<RegistryBackend> make_etcd_backend(bool routers_watch);

// utime + stime of a process, in seconds (/proc/<pid>/stat); 0 when it cannot be read.
double process_cpu_seconds(pid_t pid);

}  // namespace epd::bench

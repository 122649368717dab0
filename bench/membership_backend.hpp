#pragma once
// The two sides of membership that `epd-bench membership` swaps per backend: where membership lives (the
// embedded registry in a child process, or a real etcd) and what each simulated instance runs to take
// part in it (the registry client, or the etcd membership actor). The first side lives in the bench's
// own process; the second in every worker process that simulates instances (membership_fleet.hpp).
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
  // ChannelHub) per worker process, and with etcd one LeaseKeeper keeps all their records alive; false: each
  // has its own, as a real process does (the simulation before, for A/B runs).
  bool shared_threads = true;
  // Simulated instances per worker process (routers always have one each): each process has the
  // container's 20,000 descriptors and its own two CAF threads.
  int per_process = 500;
  // The niceness of the processes that hold simulated instances (not the routers'): on a shared box their
  // CPU goes last, after etcd's, the registry's and the routers', each of which a real fleet runs on
  // machines of its own. 0: all equal.
  int instances_nice = 10;
  // Instances started per second at the start (0: all at once). A fleet that does not fit its start's
  // O(N^2) lists on one host (5,000 on etcd) still converges when they come at the pace they are applied.
  int start_rate = 0;
  // After the changes, stop one worker process (SIGSTOP) long enough that its instances expire
  // (RegistryBackend::freeze_for), resume it, and time until every directory agrees again.
  bool freeze = false;
  // Last, with two routers or more: kill -9 the process of the last router, time until every directory
  // agrees without it, then add an instance and time until every directory lists it. Its instances hear
  // of both only through the routers that took them over.
  bool kill_router = false;
};

// One simulated instance's part in membership.
class MemberLink {
 public:
  virtual ~MemberLink() = default;
  // As a kill -9 leaves it: nothing said to anyone, nothing revoked. The caller stops the bridge.
  virtual void crash() = 0;
};

// What the simulated instances of one worker process run to take part in membership.
class MemberSide {
 public:
  virtual ~MemberSide() = default;
  // Starts the membership of one instance; `view` is set for routers.
  virtual std::unique_ptr<MemberLink> join(caf::actor_system& system, actors::BridgePtr bridge,
                                           const std::string& role,
                                           std::shared_ptr<actors::RegistryView> view) = 0;
  // Routers the instances reach before any PEERS (the registry's endpoint): no ZMTP heartbeats to them.
  virtual std::vector<std::string> router_endpoints() const { return {}; }
  // Bytes this process's instances received about membership, when not through their bridges (etcd: its
  // HTTP answers, and the RECORDS its routers sent); nullopt: what the bridges received (PEERS).
  virtual std::optional<uint64_t> bytes_to_instances() const { return std::nullopt; }
  // Counters summed over the worker processes (etcd: the instances' HTTP calls and connections).
  virtual std::vector<std::pair<std::string, double>> counters() const { return {}; }
};

class RegistryBackend {
 public:
  virtual ~RegistryBackend() = default;
  virtual std::string describe() const = 0;
  virtual bool start(const MembershipOptions& opt) = 0;
  virtual double cpu_seconds() const = 0;  // the registry's (or etcd's) CPU so far, user + system
  virtual void stop() = 0;
  // Where the worker processes' instances find it: the registry's control endpoint, or etcd's client URL.
  virtual std::string member_endpoint() const = 0;

  // How many simulated instances are routers, keeping a placement view from heartbeats. The embedded
  // registry keeps the only view itself, in its own process: 0.
  virtual int routers() const { return 0; }
  // How long a kill may take until every directory agrees.
  virtual std::chrono::milliseconds kill_limit(const MembershipOptions& o) const {
    return o.interval * (o.misses + 4);
  }
  // How long a frozen process stays stopped: until its instances have been expired (registry) or their
  // leases have run out (etcd).
  virtual std::chrono::milliseconds freeze_for(const MembershipOptions& o) const {
    return o.interval * (o.misses + 3);
  }
  // The backend's own counters (etcd: writes, proposals, lease renewals), as {name, value}; the bench
  // prints their rate over the heartbeats-only window.
  virtual std::vector<std::pair<std::string, double>> counters() const { return {}; }
};

// Backends by name: router, router-full (the embedded registry with PEERS deltas, and with the full lists
// before them), etcd, etcd-routers (etcd_watch = "routers": only the two routers watch; they send the
// others RECORDS). nullptr for an unknown name.
std::unique_ptr<RegistryBackend> make_backend(const std::string& name);
std::unique_ptr<MemberSide> make_member_side(const std::string& name, const std::string& endpoint,
                                             const MembershipOptions& opt);

std::unique_ptr<RegistryBackend> make_embedded_backend(bool full_lists);
std::unique_ptr<MemberSide> make_registry_member_side(const std::string& endpoint,
                                                      const MembershipOptions& opt);
std::unique_ptr<RegistryBackend> make_etcd_backend(bool routers_watch);
std::unique_ptr<MemberSide> make_etcd_member_side(bool routers_watch, const std::string& endpoint,
                                                  const MembershipOptions& opt);

// utime + stime of a process, in seconds (/proc/<pid>/stat); 0 when it cannot be read.
double process_cpu_seconds(pid_t pid);

}  // namespace epd::bench

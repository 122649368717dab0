#pragma once
// What talks to etcd for one instance, so that no actor ever blocks on it:
//  - its record is kept alive by a LeaseKeeper (a lease, the record put under it, renewals every TTL/3 on a
//    gRPC keep-alive stream, a new lease and put when etcd lost the old one): the process's own, or one
//    shared by every instance of a process (epd-bench membership's simulated fleet);
//  - the watcher thread (unless routers watch for everyone) lists `<prefix>instances/` and watches it from
//    the listing's revision; after a broken stream it watches again from the last revision it saw (nothing
//    is missed), after a compaction it lists again.
// Both tell the membership actor what they learn and retry forever: etcd trouble never stops the instance.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "epd/etcd/etcd_client.hpp"
#include "epd/etcd/lease_keeper.hpp"
#include "epd/protocol/messages.hpp"

namespace epd::actors::etcd_backend {

// The whole membership as listed at `revision` (at start and after a compaction).
struct Listing {
  std::vector<protocol::PeerInfo> peers;
  int64_t revision = 0;
};

// Changes seen by the watch, in order: a record put (info set) or deleted (info empty) at `revision` (etcd's
// mod_revision of the key: routers pass it on in RECORDS).
struct Change {
  std::string id;
  std::optional<protocol::PeerInfo> info;
  int64_t revision = 0;
};
struct Changes {
  std::vector<Change> changes;
  int64_t revision = 0;
};

// The session's state changed: our record is (again) in etcd, or etcd cannot be reached.
struct SessionNews {
  bool registered = false;
  std::string detail;
};

struct AgentConfig {
  std::string prefix;  // the cluster's prefix, "/epd/<name>/"
  std::chrono::milliseconds lease_ttl{5000};
  std::chrono::milliseconds retry{500};  // between attempts while etcd is unreachable
  std::chrono::milliseconds watch_idle{60000};
  bool watch = true;  // false: no watcher (etcd_watch = "routers" on an instance that is no router)
  // Keeps our record alive; null: one of our own, on the client's endpoints.
  std::shared_ptr<etcd::LeaseKeeper> keeper{};
};

class Agent {
 public:
  Agent(etcd::EtcdClient client, AgentConfig config, protocol::PeerInfo self, caf::actor membership);
  ~Agent();  // stop()
  void start();
  // Ends the watcher and stops keeping our record; revokes its lease (bounded by the client timeout) so our
  // key goes at once, unless `revoke` is false (a simulated crash: the key goes when the lease expires).
  void stop(bool revoke = true);

 private:
  void run_watcher();
  bool sleep_for(std::chrono::milliseconds d);  // false when stopping

  etcd::EtcdClient client_;
  const AgentConfig config_;
  const protocol::PeerInfo self_;
  caf::actor membership_;
  std::shared_ptr<etcd::LeaseKeeper> keeper_;
  std::optional<etcd::LeaseKeeper::Handle> kept_;  // our record, once started
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;  // with woken_: sleep_for ends when stop() is called
  std::condition_variable woken_;
  std::thread watcher_;
};

}  // namespace epd::actors::etcd_backend

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::etcd_backend::Listing)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::etcd_backend::Changes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::etcd_backend::SessionNews)

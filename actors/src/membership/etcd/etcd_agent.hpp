#pragma once
// The two threads that talk to etcd for one instance, so that no actor ever blocks on it:
//  - the session keeps this instance's record alive: grants a lease, puts the record under it, renews the
//    lease every TTL/3 (over a gRPC keep-alive stream, as etcd's own clients do), and when etcd says the
//    lease is gone (it expired while etcd was unreachable, or etcd lost it) grants a new one and puts the
//    record again;
//  - the watcher (unless routers watch for everyone) lists `<prefix>instances/` and watches it from the
//  listing's revision; after a broken
//    stream it watches again from the last revision it saw (nothing is missed), after a compaction it lists
//    again. Both post what they learn to the membership actor and retry forever: etcd trouble never stops
//    the instance.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "epd/etcd/etcd_client.hpp"
#include "epd/etcd/lease_stream.hpp"
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
  bool watch =
      true;  // false: only the session runs (etcd_watch = "routers" on an instance that is no router)
};

class Agent {
 public:
  Agent(etcd::EtcdClient client, AgentConfig config, protocol::PeerInfo self, caf::actor membership);
  ~Agent();  // stop()
  void start();
  // Ends both threads; revokes the lease (bounded by the client timeout) so our key goes at once, unless
  // `revoke` is false (a simulated crash: the key goes when the lease expires).
  void stop(bool revoke = true);

 private:
  void run_session();
  void run_watcher();
  // One renewal: over the stream, or through the JSON gateway while the stream has not yet worked.
  protocol::Result<int64_t> renew(int64_t lease);
  bool sleep_for(std::chrono::milliseconds d);  // false when stopping

  etcd::EtcdClient client_;
  etcd::LeaseStream stream_;  // the session thread's only
  // The session thread's only:
  bool stream_worked_ = false;
  int stream_failures_ = 0;  // before it first worked
  int gateway_left_ = 0;     // renewals through the gateway before the stream is tried again
  const AgentConfig config_;
  const protocol::PeerInfo self_;
  caf::actor membership_;
  std::atomic<bool> stop_{false};
  std::mutex sleep_mu_;  // with woken_: sleep_for ends when stop() is called
  std::condition_variable woken_;
  std::atomic<int64_t> lease_{0};
  std::thread session_, watcher_;
};

}  // namespace epd::actors::etcd_backend

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::etcd_backend::Listing)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::etcd_backend::Changes)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::etcd_backend::SessionNews)

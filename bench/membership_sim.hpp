#pragma once
// The simulated instances of one worker process of `epd-bench membership`: each a bridge plus its
// backend's membership side (no model, no engine, no role), on one small actor system. Routers keep a
// RegistryView from the heartbeats they receive, as a real router does. Each instance has its own control
// channel (ROUTER, outbound ROUTER, TCP connections) and speaks the real protocol; with
// MembershipOptions::shared_threads their sockets share one ZeroMQ context and one reading thread
// (transport::ChannelHub), and with etcd one LeaseKeeper (one thread, one keep-alive stream, one pool of HTTP
// connections) keeps every instance's record alive under the instance's own lease. An etcd instance that
// watches (not with etcd_watch = "routers") still has its own watch thread and stream.
//
// The fleet's live instances (in every process) are what each directory should list: the coordinator
// tells every process of each start and kill (`expect` / `forget`), and of each instance that rejoined as a
// new incarnation (`rejoined`, asked of every process on every poll).
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "epd/transport/control_channel.hpp"
#include "membership_backend.hpp"

namespace epd::bench {

class Simulation {
 public:
  Simulation(const MembershipOptions& opt, MemberSide& side);
  ~Simulation();  // stops every instance still running

  // Starts an instance here; its incarnation, or nullopt (said on stderr) when it could not start.
  std::optional<uint64_t> add(const std::string& id, const std::string& role, bool router);
  // As a kill -9 does: its sockets close, it says nothing, revokes nothing.
  void kill(const std::string& id);

  // This process's instances whose incarnation changed since they started or were last reported here: an
  // instance the registry expired (a stall) rejoins as a new incarnation, which the fleet must then expect.
  std::vector<std::pair<std::string, uint64_t>> rejoined();

  // The fleet's live instances, in every process.
  void expect(const std::string& id, uint64_t incarnation);
  void forget(const std::string& id);
  // An instance of this process whose directory does not list exactly the fleet's live instances; nullopt
  // when all do. One that agreed is not asked again until the fleet changes: a change is one step, nothing
  // undoes it. Cheap: the bench asks every few hundred microseconds.
  std::optional<std::string> disagreeing();
  // Every instance is asked again: after a stall, directories that agreed may have lost peers since.
  void recheck() { changed(); }
  // What an instance's directory holds, for a report.
  std::string describe(const std::string& id) const;

  // Over this process's routers (true when it has none):
  // no router would place on `id`: its entry is gone or unhealthy, or the router's directory holds it dead.
  bool routed_around(const std::string& id) const;
  // no router's directory lists `id` any more (its record is gone).
  bool unlisted_by_routers(const std::string& id) const;
  // every router would place on `id`: a healthy entry of its live incarnation.
  bool placeable_everywhere(const std::string& id) const;
  // every router would place on every live instance of the fleet.
  bool all_placeable_everywhere() const;

  struct Traffic {
    uint64_t bytes_in = 0, bytes_out = 0, frames_out = 0;  // over every bridge, retired ones included
  };
  Traffic traffic() const;

 private:
  struct Member {
    actors::BridgePtr bridge;
    std::unique_ptr<MemberLink> link;
    std::shared_ptr<actors::RegistryView> view;  // routers only
    uint64_t reported = 0;                       // the incarnation the fleet was last told of
  };
  void retire(Member& m);
  void changed();  // every instance is asked again

  MembershipOptions opt_;
  MemberSide& side_;
  std::unique_ptr<caf::actor_system> system_;
  std::shared_ptr<transport::ChannelHub> hub_;  // every bridge's sockets, read by one thread
  std::map<std::string, Member> live_;
  std::vector<std::string> routers_;
  std::map<std::string, uint64_t> expected_;
  std::optional<std::string> agreed_up_to_;  // live_ is checked in order; those before this agreed
  bool all_agreed_ = false;
  Traffic retired_;
};

}  // namespace epd::bench

#pragma once
// The simulated instances of `epd-bench membership`: each a bridge plus its backend's membership side (no
// model, no engine, no role), all in this process on one small actor system. The first
// `backend.routers()` are routers: they keep a RegistryView from the heartbeats they receive, as a real
// router does. Each instance has its own control channel (ROUTER, DEALERs, TCP connections) and speaks the
// real protocol; with MembershipOptions::shared_threads their sockets share one ZeroMQ context and one
// reading thread (transport::ChannelHub), so thousands fit in one process. With etcd each instance still
// runs its own two etcd threads (lease session, watch) and HTTP connections.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epd/transport/control_channel.hpp"
#include "membership_backend.hpp"

namespace epd::bench {

class Simulation {
 public:
  using clock = std::chrono::steady_clock;

  Simulation(const MembershipOptions& opt, RegistryBackend& backend);
  ~Simulation();  // stops every instance still running

  bool add(const std::string& id);
  // As a kill -9 does: its sockets close, it says nothing, revokes nothing.
  void kill(const std::string& id);

  // Polls until every live instance lists exactly the live instances at their incarnations, calling
  // `each_poll` on every round (and once more at the end); the ms since `since`, nullopt after `limit`.
  std::optional<double> converge_ms(clock::time_point since, std::chrono::milliseconds limit,
                                    const std::function<void()>& each_poll = {});

  // No router would place on `id`: its entry is gone or unhealthy, or the router's directory holds it dead.
  bool routed_around(const std::string& id) const;
  // No router's directory lists `id` any more (its record is gone).
  bool unlisted_by_routers(const std::string& id) const;
  // Every router would place on `id`: a healthy entry of its live incarnation.
  bool placeable_everywhere(const std::string& id) const;
  // Every router would place on every live instance.
  bool all_placeable_everywhere() const;
  bool has_routers() const { return !routers_.empty(); }

  struct Traffic {
    uint64_t bytes_in = 0, bytes_out = 0, frames_out = 0;  // over every bridge, retired ones included
  };
  Traffic traffic() const;

 private:
  struct Member {
    actors::BridgePtr bridge;
    std::unique_ptr<MemberLink> link;
    std::shared_ptr<actors::RegistryView> view;  // routers only
  };
  void retire(Member& m);
  std::chrono::microseconds poll_interval() const;

  MembershipOptions opt_;
  RegistryBackend& backend_;
  std::unique_ptr<caf::actor_system> system_;
  std::shared_ptr<transport::ChannelHub> hub_;  // every bridge's sockets, read by one thread
  std::map<std::string, Member> live_;
  std::vector<std::string> routers_;
  Traffic retired_;
  int started_ = 0;
};

}  // namespace epd::bench

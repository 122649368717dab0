#pragma once
// The registry client of every instance: says HELLO to the registry until acknowledged, sends HEARTBEATs
// with the role's load, keeps the bridge's peer directory equal to the registry's PEERS, and tells the role
// which peers joined, left or restarted.
#include <caf/all.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "epd/actors/bridge.hpp"
#include "epd/actors/load_gauge.hpp"

namespace epd::actors {

struct MembershipConfig {
  std::string registry_endpoint;
  std::string role;
  std::chrono::milliseconds heartbeat_interval{500};
  std::optional<protocol::SegmentDescriptor> segment;
  std::optional<protocol::KvLayout> kv_layout;
  uint32_t kv_pages_total = 0;
};

// Delivered to the role's main actor after every PEERS that changed something, and at once when a
// peer's control connection breaks or a newer incarnation of it speaks (PeerEvent). A change with
// old_incarnation != 0 means: that incarnation is dead to us; fail every room shared with it.
struct PeerChanges {
  std::vector<PeerDirectory::Change> changes;
  // false: only the connection broke (the peer may be hung rather than gone); true: the registry dropped
  // it or a new incarnation spoke, so it certainly writes nothing any more.
  bool confirmed = true;
};

caf::actor spawn_membership(caf::actor_system& system, BridgePtr bridge, MembershipConfig config,
                            std::shared_ptr<LoadGauge> load, caf::actor role);

}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::PeerChanges)

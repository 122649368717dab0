#pragma once
// The registry client of every instance: says HELLO to the registry until acknowledged, sends HEARTBEATs
// with the role's load, keeps the bridge's peer directory equal to the registry's PEERS, and tells the role
// which peers joined, left or restarted.
//
// Rejoining: when the registry answers a HEARTBEAT with unknown_peer, it dropped us (we stalled longer than
// heartbeat_interval x misses, a partition cut us off, or the registry restarted) and every peer has already
// failed the rooms it shared with us. Membership then tells the role that every peer is gone (so it fails
// and frees everything it can), waits until no write of ours is in flight any more, takes a new
// incarnation and says HELLO with it. Peers see a new incarnation, which proves the old
// one writes nothing any more; nothing the old one held is ever delivered into a retried request.
#include <caf/all.hpp>
#include <chrono>
#include <optional>
#include <string>

#include "epd/actors/bridge.hpp"
#include "epd/actors/load_gauge.hpp"
#include "epd/actors/process_metrics.hpp"
#include "epd/protocol/compat.hpp"
#include "epd/transport/engine.hpp"

namespace epd::actors {

struct MembershipConfig {
  std::string registry_endpoint;
  std::string role;
  std::chrono::milliseconds heartbeat_interval{500};
  uint32_t heartbeat_misses = 3;                       // the registry's expiry limit is interval x misses
  std::optional<protocol::SegmentDescriptor> segment;  // sent in HELLO when there is no engine (tests)
  std::optional<protocol::KvLayout> kv_layout;
  uint32_t kv_pages_total = 0;
  // Write-fence figures go into heartbeats; HELLO carries its current descriptor; a rejoin rotates its token.
  transport::Engine* engine = nullptr;
  std::shared_ptr<MembershipMetrics> metrics;  // peers joining, restarting, lost, refused (may be null)
  // Sent in HELLO. A registry, or a listed peer, with no protocol revision in common or another model is
  // refused: we do not register with that registry, and never share a room with that peer.
  protocol::BuildIdentity identity = protocol::current_protocol_identity();
};

// Delivered to the role's main actor after every PEERS that changed something, and at once when a
// peer's control connection breaks or a newer incarnation of it speaks (PeerEvent). A change with
// old_incarnation != 0 means: that incarnation is dead to us; fail every room shared with it. None of these
// proves that the old incarnation writes nothing any more (a frozen process is dropped too); only a new
// incarnation of it does (new_incarnation != 0), or the checks of docs/failure-handling.md, "Stale writers".
struct PeerChanges {
  std::vector<PeerDirectory::Change> changes;
};

// A new incarnation number, greater than `after`: time in the high bits keeps incarnations increasing
// across restarts and rejoins, random low bits avoid collisions between processes started at once.
uint64_t fresh_incarnation(uint64_t after = 0);

caf::actor spawn_membership(caf::actor_system& system, BridgePtr bridge, MembershipConfig config,
                            std::shared_ptr<LoadGauge> load, caf::actor role);

}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::PeerChanges)

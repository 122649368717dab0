#pragma once
// The embedded registry (hosted by the router by default): accepts HELLOs, tracks HEARTBEATs, expires
// instances that miss `misses` intervals, refuses incompatible builds, and after each change sends every
// member a PEERS delta (the full list only to an instance that said HELLO or asked for it after a gap). Loads
// stay here: its table, load included, is mirrored entry by entry into a RegistryView for the router and its
// HTTP readers.
#include <caf/all.hpp>
#include <chrono>
#include <memory>

#include "epd/actors/bridge.hpp"
#include "epd/actors/membership/registry_view.hpp"
#include "epd/actors/process_metrics.hpp"
#include "epd/protocol/compat.hpp"

namespace epd::actors {

struct RegistryConfig {
  std::chrono::milliseconds heartbeat_interval{500};
  uint32_t misses = 3;
  // The behaviour before deltas, kept as epd-bench membership's baseline: the full list to every member after
  // each change (health changes included) and the whole table copied into the view on every HEARTBEAT.
  bool full_lists = false;
  // Changes within this long after a PEERS version go out together as the next one (a lone change goes at
  // once): a start or a rack's failure costs one delta per member per window, not one per change. While
  // changes keep coming each window is twice the last, up to `publish_window_max` (BurstWindow).
  std::chrono::milliseconds publish_window{50};
  std::chrono::milliseconds publish_window_max{400};
  // A full list sent to a member goes again only once it has been on its way this long, however often the
  // member asks; a member whose HEARTBEATs hold one older PEERS version this long, with no list on its way,
  // lost a delta that no later delta showed it and gets the list (ListResend). Long, because a member on a
  // busy host reads late and a resend costs the whole list; each resend to a member doubles its next wait,
  // up to 4 times.
  std::chrono::milliseconds list_resend_wait{30000};
  // Ours: a HELLO from a build with no protocol revision in common, or another model, is refused (and
  // counted in `metrics`, which may be null).
  protocol::BuildIdentity identity = protocol::current_protocol_identity();
  std::shared_ptr<MembershipMetrics> metrics;
};

caf::actor spawn_registry(caf::actor_system& system, BridgePtr bridge, RegistryConfig config,
                          std::shared_ptr<RegistryView> view);

}  // namespace epd::actors

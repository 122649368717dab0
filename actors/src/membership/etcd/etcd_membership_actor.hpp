#pragma once
// The etcd membership actor without its etcd threads: start_etcd_membership() pairs it with an Agent, and the
// unit tests feed it the Agent's messages (Listing, Changes) themselves.
#include <caf/all.hpp>
#include <memory>

#include "epd/actors/membership/etcd_membership.hpp"

namespace epd::actors::etcd_backend {

// Spawns the actor and subscribes it to HEARTBEATs and peer liveness on `bridge`.
protocol::Result<caf::actor> spawn_etcd_membership(caf::actor_system& system, BridgePtr bridge,
                                                   EtcdMembershipConfig config,
                                                   std::shared_ptr<LoadGauge> load, caf::actor role,
                                                   std::shared_ptr<RegistryView> view);

}  // namespace epd::actors::etcd_backend

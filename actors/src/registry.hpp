#pragma once
// The embedded registry (hosted by the router by default): accepts HELLOs, tracks HEARTBEATs, expires
// instances that miss `misses` intervals, and pushes the full membership (PEERS) to every member after
// each change. Its table is mirrored into a RegistryView for HTTP readers.
#include <caf/all.hpp>
#include <chrono>
#include <memory>

#include "epd/actors/bridge.hpp"
#include "epd/actors/registry_view.hpp"

namespace epd::actors {

struct RegistryConfig {
  std::chrono::milliseconds heartbeat_interval{500};
  uint32_t misses = 3;
};

caf::actor spawn_registry(caf::actor_system& system, BridgePtr bridge, RegistryConfig config,
                          std::shared_ptr<RegistryView> view);

}  // namespace epd::actors

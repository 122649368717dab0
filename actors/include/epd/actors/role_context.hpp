#pragma once
// What every role gets from the process runner: the actor system, its configuration, the bridge, the
// transfer engine (roles that move bulk bytes), the model configuration and the load gauge it publishes.
#include <caf/all.hpp>
#include <functional>
#include <memory>
#include <optional>

#include "epd/actors/bridge.hpp"
#include "epd/actors/load_gauge.hpp"
#include "epd/actors/membership/registry_view.hpp"
#include "epd/config/cluster_config.hpp"
#include "epd/metrics/registry.hpp"
#include "epd/model/config.hpp"
#include "epd/protocol/kv_layout.hpp"
#include "epd/transport/engine.hpp"

namespace epd::actors {

struct RoleContext {
  caf::actor_system* system = nullptr;
  const config::ClusterConfig* cluster = nullptr;
  const config::InstanceConfig* instance = nullptr;
  BridgePtr bridge;
  transport::Engine* engine = nullptr;  // null for roles that declare needs_engine = false
  model::ModelConfig model;
  std::shared_ptr<LoadGauge> load = std::make_shared<LoadGauge>();
  std::shared_ptr<RegistryView> registry;  // set in the process that hosts the registry
  // The process's metrics (docs/metrics.md); roles add their own families. Served when the instance has a
  // `metrics` address.
  metrics::RegistryPtr metrics = std::make_shared<metrics::Registry>();
  // Compute and transfer actors get their own threads (their work blocks). Tests set false so CAF's test
  // coordinator runs them like every other actor, one message at a time on the test's thread.
  bool detached_workers = true;
};

// What a spawned role tells the runner: its main actor (receives everything not subscribed elsewhere and
// peer changes) and what goes into its HELLO.
struct RoleHandle {
  caf::actor main;
  std::optional<protocol::KvLayout> kv_layout;
  uint32_t kv_pages_total = 0;
  std::vector<caf::actor> others;  // stopped with the role
  // Called once on SIGTERM/SIGINT before the role is stopped (membership still up): stops taking new work
  // and blocks until the work in flight is done or the role's grace period has passed. Optional.
  std::function<void()> drain;
  // Called when the default drain runs out of time with rooms still held: gives every one back to its router
  // (error handed_over), which goes on with it elsewhere from the tokens drawn so far. Returns at once; the
  // drain then waits, briefly, for the rooms to be gone. Optional (decode has it).
  std::function<void()> hand_over;
};

}  // namespace epd::actors

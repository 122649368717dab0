#pragma once
// The supervisor of a role's transfer workers. It monitors every worker; when one dies (an exception in a
// handler always ends a CAF actor) it restarts it at once, within a budget of restarts per window, and
// tells the role which worker died and why, so the role fails exactly the rooms that worker held and sends
// later jobs to the replacement. With the budget spent the slot stays empty, the instance reports itself
// unhealthy (LoadGauge::healthy -> heartbeat -> registry -> the router avoids it), and the worker is
// restarted when the window allows again.
#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "epd/actors/bridge.hpp"
#include "epd/actors/load_gauge.hpp"
#include "epd/actors/role_context.hpp"
#include "epd/actors/transfer_worker.hpp"
#include "epd/config/settings.hpp"

namespace epd::actors {

struct SupervisorConfig {
  std::string name = "transfer";  // workers are "<name>-<i>"
  uint32_t workers = 1;
  TransferWorkerConfig worker;
  uint32_t max_restarts = 5;  // per window, over all workers of the role
  std::chrono::milliseconds window{60000};
};

// To the role: worker `index` died with `cause`. `replacement` is its restarted successor, or invalid when
// the restart budget is spent (the role must not send to this slot until WorkerRestored).
// `hit`: the rooms whose writes the crash cut short — the job that threw, and jobs whose batch was still
// running. A job the dead worker never started (queued in its mailbox, or sent by the role before it heard
// of the crash) or whose bytes had all landed is not hit: the role sends it again to the replacement
// instead of failing its room with a cause that is not its own. nullopt when the worker died without
// saying (then every room with a job on it is failed).
struct WorkerCrashed {
  uint32_t index = 0;
  std::string cause;
  caf::actor replacement;
  std::optional<std::vector<uint64_t>> hit;
};

struct WorkerRestored {
  uint32_t index = 0;
  caf::actor worker;
};

struct TransferPool {
  caf::actor supervisor;  // link the role to it: it stops the workers when it goes
  std::vector<caf::actor> workers;
};

// Spawns a role's transfer workers under a supervisor that reports to `role` and is linked to it (the
// role and its supervisor stop together).
TransferPool spawn_transfer_pool(caf::event_based_actor* role, const RoleContext& ctx,
                                 SupervisorConfig config);

}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::WorkerCrashed)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::WorkerRestored)

#pragma once
// A rolling restart: the instances of a process group restarted one at a time, each waited for until every
// router lists it healthy again as a new process (a new incarnation) before the next one goes. Each
// instance drains on its SIGTERM (docs/failure-handling.md, "A graceful stop"), so with a second instance
// of each role no request fails. epd-cluster runs it on SIGHUP.
#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "epd/launcher/output_sink.hpp"
#include "epd/launcher/process_group.hpp"
#include "epd/launcher/readiness.hpp"
#include "epd/protocol/result.hpp"

namespace epd::launcher {

struct RollOptions {
  std::vector<HostPort> routers;  // every one must list the restarted instance healthy again
  // Per instance: its stop (drain, then SIGKILL after the group's stop_grace) and start, then its return
  // to every router's list.
  std::chrono::milliseconds restart_timeout{30000};
  std::chrono::milliseconds healthy_timeout{30000};
  std::function<bool()> cancelled;  // polled while waiting: true ends the roll (a stop signal)
};

// Restarts `ids` in order. Stops at the first instance that does not come back (the error names it and
// why), so a bad build or config takes down one instance, not the fleet.
protocol::Status roll_instances(ProcessGroup& group, const std::vector<std::string>& ids,
                                const RollOptions& opts, OutputSink& sink);

}  // namespace epd::launcher

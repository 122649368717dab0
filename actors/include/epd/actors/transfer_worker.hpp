#pragma once
// A transfer worker: a detached actor (opening a tcp session can block) that owns sessions to peers and runs
// write jobs for the rooms sharded onto it. A job completes when the peer has the bytes (the engine's
// receiver-applied batch). A failed write is retried once on a freshly opened session; if that fails too,
// the job fails with the transfer's code and detail and the peer's session is torn down. Each cached
// session keeps its failure rate over a window and is recycled when the rate reaches the threshold.
// A worker that throws dies (CAF ends the actor); its supervisor (transfer_supervisor.hpp) restarts it.
#include <caf/all.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "epd/actors/bridge.hpp"
#include "epd/actors/load_gauge.hpp"
#include "epd/actors/process_metrics.hpp"
#include "epd/transport/engine.hpp"

namespace epd::actors {

using forget_atom = caf::atom_constant<caf::atom("forget")>;

struct TransferJob {
  uint64_t room = 0;
  uint64_t tag = 0;  // the requester's own id for this job (e.g. chunk index)
  std::string peer_id;
  uint64_t peer_incarnation = 0;  // the incarnation the room was made with; 0 = whatever is listed
  std::vector<transport::WriteOp> ops;
  caf::actor reply_to;
};

struct TransferDone {
  uint64_t room = 0;
  uint64_t tag = 0;
  bool ok = false;
  protocol::Error error;
  uint64_t bytes = 0;
  uint64_t micros = 0;
  uint32_t attempts = 0;
};

struct TransferWorkerConfig {
  std::string name = "transfer-worker";
  std::chrono::milliseconds slow_threshold{200};  // slower jobs are logged at info
  bool retry_once = true;
  uint32_t failure_window = 20;         // outcomes kept per session
  uint32_t failure_threshold_pct = 50;  // recycle a session at this failure rate (0 = never)
  std::shared_ptr<LoadGauge> counters;  // retries, failures, recycled sessions (may be null)
  std::shared_ptr<TransferMetrics> metrics;  // durations, sizes, failures by code (may be null)
  bool detached = true;                 // RoleContext::detached_workers
};

caf::actor spawn_transfer_worker(caf::actor_system& system, transport::Engine& engine, BridgePtr bridge,
                                 TransferWorkerConfig config);

}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::TransferJob)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::TransferDone)

#pragma once
// A transfer worker: a detached actor (opening a tcp session can block) that owns sessions to peers and runs
// write jobs for the rooms sharded onto it. A job completes when the peer has the bytes (the engine's
// receiver-applied batch). A failed write is retried once on a freshly opened session; then the job fails
// with the transfer's code and detail, and the session is torn down.
#include <caf/all.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "epd/actors/bridge.hpp"
#include "epd/transport/engine.hpp"

namespace epd::actors {

using forget_atom = caf::atom_constant<caf::atom("forget")>;

struct TransferJob {
  uint64_t room = 0;
  uint64_t tag = 0;  // the requester's own id for this job (e.g. chunk index)
  std::string peer_id;
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
};

caf::actor spawn_transfer_worker(caf::actor_system& system, transport::Engine& engine, BridgePtr bridge,
                                 TransferWorkerConfig config);

}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::TransferJob)
CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::TransferDone)

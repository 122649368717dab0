#pragma once
// A role's transfer workers as the role sees them: which are alive, which one a room's writes go through,
// and the bookkeeping of the supervisor's crash/restore news. Shared by every role that moves bulk bytes.
#include <caf/all.hpp>
#include <optional>
#include <string>
#include <vector>

#include "epd/actors/transfer_supervisor.hpp"

namespace epd::actors::kernel {

class TransferWorkers {
 public:
  // Spawns the pool under its supervisor, linked to `role`.
  void start(caf::event_based_actor* role, const RoleContext& ctx, SupervisorConfig config) {
    auto pool = spawn_transfer_pool(role, ctx, std::move(config));
    workers_ = std::move(pool.workers);
    supervisor_ = pool.supervisor;
  }
  size_t size() const { return workers_.size(); }
  // `preferred` if alive, else the next live worker after it; nullopt when none is (restart budget spent).
  std::optional<uint32_t> live(uint32_t preferred) const {
    for (size_t i = 0; i < workers_.size(); ++i) {
      const uint32_t w = uint32_t((preferred + i) % workers_.size());
      if (workers_[w]) return w;
    }
    return std::nullopt;
  }
  const caf::actor& at(uint32_t index) const { return workers_.at(index); }
  // A peer left: every worker drops its sessions to it.
  void forget_peer(caf::event_based_actor* self, const std::string& peer) const {
    for (const auto& w : workers_)
      if (w) self->send(w, forget_atom::value, peer);
  }
  void crashed(const WorkerCrashed& wc) { workers_.at(wc.index) = wc.replacement; }
  void restored(const WorkerRestored& wr) { workers_.at(wr.index) = wr.worker; }

 private:
  std::vector<caf::actor> workers_;  // an invalid entry: crashed, not restarted yet
  caf::actor supervisor_;  // never sent to: the one strong reference that keeps the supervisor alive
};

}  // namespace epd::actors::kernel

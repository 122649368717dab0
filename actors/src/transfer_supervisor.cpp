#include "epd/actors/transfer_supervisor.hpp"

#include <spdlog/spdlog.h>

#include <deque>

#include "epd/actors/role_support.hpp"

namespace epd::actors {
namespace {

using clock = std::chrono::steady_clock;
using restart_atom = caf::atom_constant<caf::atom("restart")>;
using Workers = std::shared_ptr<std::vector<caf::actor>>;

struct SupervisorState {
  transport::Engine* engine = nullptr;
  BridgePtr bridge;
  SupervisorConfig config;
  std::shared_ptr<LoadGauge> load;
  caf::actor role;
  Workers workers;                       // shared with the exit functor, which stops them
  std::deque<clock::time_point> recent;  // restarts inside the window
  bool restart_pending = false;
  static inline const char* name = "transfer-supervisor";
};

// The cause text of a worker's exit reason (the exception's what(), set by the worker's handler).
std::string cause_of(const caf::error& reason) {
  const auto& ctx = reason.context();
  if (ctx.match_elements<std::string>() || ctx.match_elements<std::string, std::vector<uint64_t>>())
    return ctx.get_as<std::string>(0);
  return caf::to_string(reason);
}

// The rooms the crash cut short, as the worker's handler named them; nullopt if it did not.
std::optional<std::vector<uint64_t>> hit_of(const caf::error& reason) {
  const auto& ctx = reason.context();
  if (ctx.match_elements<std::string, std::vector<uint64_t>>()) return ctx.get_as<std::vector<uint64_t>>(1);
  return std::nullopt;
}

caf::actor spawn_worker(caf::actor_system& sys, const SupervisorState& st, uint32_t index) {
  TransferWorkerConfig wc = st.config.worker;
  wc.name = st.config.name + "-" + std::to_string(index);
  wc.counters = st.load;
  return spawn_transfer_worker(sys, *st.engine, st.bridge, wc);
}

bool budget_left(SupervisorState& st, clock::time_point now) {
  while (!st.recent.empty() && now - st.recent.front() >= st.config.window) st.recent.pop_front();
  return st.recent.size() < st.config.max_restarts;
}

caf::actor restart(caf::stateful_actor<SupervisorState>* self, uint32_t index) {
  auto& st = self->state;
  auto w = spawn_worker(self->system(), st, index);
  self->monitor(w);
  (*st.workers)[index] = w;
  st.recent.push_back(clock::now());
  st.load->worker_restarts.fetch_add(1);
  return w;
}

void update_health(SupervisorState& st) {
  bool all = true;
  for (const auto& w : *st.workers) all = all && bool(w);
  if (st.load->healthy.exchange(all) != all)
    spdlog::warn("{}: instance now reports itself {}", st.config.name, all ? "healthy" : "unhealthy");
}

void schedule_restart(caf::stateful_actor<SupervisorState>* self) {
  auto& st = self->state;
  if (st.restart_pending || st.recent.empty()) return;
  st.restart_pending = true;
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(st.recent.front() +
                                                                          st.config.window - clock::now()) +
                    std::chrono::milliseconds(1);
  self->delayed_send(self, std::max(wait, std::chrono::milliseconds(1)), restart_atom::value);
}

caf::behavior supervisor(caf::stateful_actor<SupervisorState>* self, transport::Engine* engine,
                         BridgePtr bridge, SupervisorConfig config, std::shared_ptr<LoadGauge> load,
                         caf::actor role, Workers workers) {
  harden(self, "transfer-supervisor");
  auto& st = self->state;
  st.engine = engine;
  st.bridge = std::move(bridge);
  st.config = std::move(config);
  st.load = std::move(load);
  st.role = std::move(role);
  st.workers = workers;
  for (auto& w : *st.workers) self->monitor(w);  // one already dead is reported at once
  self->attach_functor([workers] {
    for (auto& w : *workers)
      if (w) caf::anon_send_exit(w, caf::exit_reason::user_shutdown);
  });
  self->set_down_handler([self](caf::down_msg& dm) {
    auto& s = self->state;
    uint32_t index = 0;
    while (index < s.workers->size() && (*s.workers)[index].address() != dm.source) ++index;
    if (index == s.workers->size()) return;
    const std::string cause = cause_of(dm.reason);
    caf::actor replacement;
    if (budget_left(s, clock::now())) {
      replacement = restart(self, index);
      spdlog::error("{}: worker {} crashed: {}; restarted ({} of {} restarts allowed per {} ms)",
                    s.config.name, index, cause, s.recent.size(), s.config.max_restarts,
                    s.config.window.count());
    } else {
      (*s.workers)[index] = caf::actor{};
      spdlog::error("{}: worker {} crashed: {}; restart budget spent ({} per {} ms): not restarted for now",
                    s.config.name, index, cause, s.config.max_restarts, s.config.window.count());
      schedule_restart(self);
    }
    update_health(s);
    self->send(s.role, WorkerCrashed{index, cause, replacement, hit_of(dm.reason)});
  });
  return {
      [=](restart_atom) {
        auto& s = self->state;
        s.restart_pending = false;
        for (uint32_t i = 0; i < s.workers->size(); ++i) {
          if ((*s.workers)[i]) continue;
          if (!budget_left(s, clock::now())) break;
          auto w = restart(self, i);
          spdlog::warn("{}: worker {} restarted after the restart window", s.config.name, i);
          self->send(s.role, WorkerRestored{i, w});
        }
        update_health(s);
        for (const auto& w : *s.workers)
          if (!w) return schedule_restart(self);
      },
  };
}

}  // namespace

TransferPool spawn_transfer_pool(caf::event_based_actor* role, const RoleContext& ctx,
                                 SupervisorConfig config) {
  auto workers = std::make_shared<std::vector<caf::actor>>();
  SupervisorState tmp;
  tmp.engine = ctx.engine;
  tmp.bridge = ctx.bridge;
  config.worker.detached = ctx.detached_workers;
  if (ctx.metrics) config.worker.metrics = std::make_shared<TransferMetrics>(*ctx.metrics, ctx.load);
  tmp.config = config;
  tmp.load = ctx.load;
  for (uint32_t i = 0; i < config.workers; ++i) workers->push_back(spawn_worker(*ctx.system, tmp, i));
  TransferPool pool;
  pool.workers = *workers;
  pool.supervisor = ctx.system->spawn(supervisor, ctx.engine, ctx.bridge, std::move(config), ctx.load,
                                      caf::actor_cast<caf::actor>(role), workers);
  role->link_to(pool.supervisor);
  return pool;
}

}  // namespace epd::actors

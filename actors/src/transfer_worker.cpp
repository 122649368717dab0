#include "epd/actors/transfer_worker.hpp"

#include <spdlog/spdlog.h>

#include "epd/actors/role_support.hpp"

#include <map>

namespace epd::actors {
namespace {

using clock = std::chrono::steady_clock;
using protocol::ErrorCode;

struct CachedSession {
  uint64_t incarnation = 0;
  transport::SessionPtr session;
};

struct InFlight {
  TransferJob job;
  uint32_t attempts = 0;
  clock::time_point started;
  uint64_t bytes = 0;
  transport::BatchPtr batch;
};

struct WorkerState {
  transport::Engine* engine = nullptr;
  BridgePtr bridge;
  TransferWorkerConfig config;
  std::map<std::string, CachedSession> sessions;
  std::map<uint64_t, InFlight> inflight;  // by job id
  uint64_t next_id = 1;
  static inline const char* name = "transfer-worker";

  // The state dies with the actor (before its attached cleanup runs): close the sessions here, which fails
  // any batch still in flight instead of leaving it to a destroyed actor.
  ~WorkerState() {
    for (auto& [_, c] : sessions) c.session->close();
  }
};

protocol::Result<transport::SessionPtr> session_for(WorkerState& st, const std::string& peer_id, bool fresh) {
  auto peer = st.bridge->peers().find(peer_id);
  if (!peer || !peer->segment)
    return protocol::make_error(ErrorCode::unknown_peer,
                                "no transfer segment known for peer '" + peer_id + "'");
  auto it = st.sessions.find(peer_id);
  if (it != st.sessions.end()) {
    if (!fresh && it->second.incarnation == peer->incarnation && it->second.session->healthy())
      return it->second.session;
    it->second.session->close();
    st.sessions.erase(it);
  }
  auto s = st.engine->open_session(*peer->segment);
  if (!s) return s.error();
  st.sessions[peer_id] = {peer->incarnation, s.value()};
  return s.value();
}

void reply(WorkerState& st, caf::event_based_actor* self, InFlight& f, bool ok, protocol::Error error) {
  const auto micros =
      uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(clock::now() - f.started).count());
  if (micros >
      uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(st.config.slow_threshold).count()))
    spdlog::info("{}: slow transfer: room {} to '{}', {} bytes in {} ms", st.config.name, f.job.room,
                 f.job.peer_id, f.bytes, micros / 1000);
  TransferDone done{f.job.room, f.job.tag, ok, std::move(error), f.bytes, micros, f.attempts};
  self->send(f.job.reply_to, std::move(done));
}

// Submits `id`'s ops; on a synchronous error replies at once. Returns false if it replied.
bool submit(WorkerState& st, caf::event_based_actor* self, uint64_t id, bool fresh_session) {
  InFlight& f = st.inflight[id];
  ++f.attempts;
  auto session = session_for(st, f.job.peer_id, fresh_session);
  protocol::Result<transport::BatchPtr> batch =
      session ? session.value()->submit(f.job.ops) : protocol::Result<transport::BatchPtr>(session.error());
  if (!batch) {
    const auto& e = batch.error();
    spdlog::warn("{}: room {} to '{}': {} bytes not submitted: {}", st.config.name, f.job.room, f.job.peer_id,
                 f.bytes, e.to_string());
    reply(st, self, f, false, e);
    st.inflight.erase(id);
    return false;
  }
  f.batch = batch.value();
  caf::actor me = caf::actor_cast<caf::actor>(self);
  f.batch->on_complete([me, id](const protocol::Status& status) {
    if (status.ok())
      caf::anon_send(me, done_atom::value, id, true, protocol::Error{protocol::ErrorCode::ok, false, {}});
    else
      caf::anon_send(me, done_atom::value, id, false, status.error());
  });
  return true;
}

caf::behavior worker(caf::stateful_actor<WorkerState>* self, transport::Engine* engine, BridgePtr bridge,
                     TransferWorkerConfig config) {
  harden(self, config.name);
  auto& st = self->state;
  st.engine = engine;
  st.bridge = std::move(bridge);
  st.config = std::move(config);
  return {
      [=](TransferJob& job) {
        auto& s = self->state;
        const uint64_t id = s.next_id++;
        InFlight f;
        f.started = clock::now();
        for (const auto& op : job.ops) f.bytes += op.len;
        f.job = std::move(job);
        s.inflight.emplace(id, std::move(f));
        submit(s, self, id, false);
      },
      [=](done_atom, uint64_t id, bool ok, protocol::Error& error) {
        auto& s = self->state;
        auto it = s.inflight.find(id);
        if (it == s.inflight.end()) return;
        InFlight& f = it->second;
        if (!ok && error.retryable && s.config.retry_once && f.attempts == 1) {
          spdlog::warn("{}: room {} to '{}': {} bytes failed ({}); retrying once on a fresh session",
                       s.config.name, f.job.room, f.job.peer_id, f.bytes, error.to_string());
          submit(s, self, id, true);
          return;
        }
        if (!ok) {
          spdlog::warn("{}: transfer failed: room={} peer='{}' bytes={} attempts={} code={} detail={}",
                       s.config.name, f.job.room, f.job.peer_id, f.bytes, f.attempts,
                       protocol::error_name(error.code), error.detail);
          // Tear the session down so the next job starts clean.
          if (auto sit = s.sessions.find(f.job.peer_id); sit != s.sessions.end()) {
            sit->second.session->close();
            s.sessions.erase(sit);
          }
        }
        reply(s, self, f, ok, std::move(error));
        s.inflight.erase(it);
      },
      [=](forget_atom, const std::string& peer_id) {
        auto& s = self->state;
        if (auto it = s.sessions.find(peer_id); it != s.sessions.end()) {
          it->second.session->close();
          s.sessions.erase(it);
        }
      },
  };
}

}  // namespace

caf::actor spawn_transfer_worker(caf::actor_system& system, transport::Engine& engine, BridgePtr bridge,
                                 TransferWorkerConfig config) {
  return system.spawn<caf::detached>(worker, &engine, std::move(bridge), std::move(config));
}

}  // namespace epd::actors

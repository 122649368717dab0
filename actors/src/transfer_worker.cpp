#include "epd/actors/transfer_worker.hpp"

#include <spdlog/spdlog.h>

#include <map>

#include "epd/actors/role_support.hpp"
#include "failure_window.hpp"

namespace epd::actors {
namespace {

using clock = std::chrono::steady_clock;
using protocol::ErrorCode;
using protocol::make_error;

struct CachedSession {
  uint64_t incarnation = 0;
  uint64_t serial = 0;  // this worker's number for the session, for log lines
  transport::SessionPtr session;
  FailureWindow window;
};

struct InFlight {
  TransferJob job;
  uint32_t attempts = 0;
  clock::time_point started;
  uint64_t bytes = 0;
  transport::BatchPtr batch;
  transport::SessionPtr session;  // the one this attempt runs on
  uint64_t serial = 0;
  bool dedicated = false;  // a retry's own fresh session, closed when the attempt ends
};

struct WorkerState {
  transport::Engine* engine = nullptr;
  BridgePtr bridge;
  TransferWorkerConfig config;
  std::map<std::string, CachedSession> sessions;
  std::map<uint64_t, InFlight> inflight;  // by job id
  uint64_t next_id = 1;
  uint64_t next_serial = 1;
  static inline const char* name = "transfer-worker";

  // The state dies with the actor (before its attached cleanup runs): close the sessions here, which fails
  // any batch still in flight instead of leaving it to a destroyed actor.
  ~WorkerState() {
    for (auto& [_, c] : sessions) c.session->close();
  }
};

void bump(const std::shared_ptr<LoadGauge>& g, std::atomic<uint64_t> LoadGauge::*counter) {
  if (g) ((*g).*counter).fetch_add(1);
}

// The role of `peer_id` as listed, for metric labels ("unknown" if it is not listed).
std::string peer_role_of(const WorkerState& st, const std::string& peer_id) {
  auto p = st.bridge->peers().find(peer_id);
  return p ? p->role : "unknown";
}

// A job failed for good: counted, by code, in the gauge and the metrics.
void count_failure(const WorkerState& st, const InFlight& f, ErrorCode code) {
  bump(st.config.counters, &LoadGauge::transfer_failures);
  if (st.config.metrics)
    st.config.metrics->failed(protocol::error_name(code), peer_role_of(st, f.job.peer_id));
}

void drop_session(WorkerState& st, const std::string& peer_id) {
  if (auto it = st.sessions.find(peer_id); it != st.sessions.end()) {
    it->second.session->close();
    st.sessions.erase(it);
  }
}

// The listed segment of `job`'s peer, refusing one of another incarnation than the room's.
protocol::Result<protocol::PeerInfo> peer_of(WorkerState& st, const TransferJob& job) {
  auto peer = st.bridge->peers().find(job.peer_id);
  if (!peer || !peer->segment)
    return make_error(ErrorCode::unknown_peer, "no transfer segment known for peer '" + job.peer_id + "'");
  if (job.peer_incarnation != 0 && peer->incarnation != job.peer_incarnation)
    return make_error(ErrorCode::incarnation_changed,
                      "room " + std::to_string(job.room) + " was made with incarnation " +
                          std::to_string(job.peer_incarnation) + " of '" + job.peer_id +
                          "', the directory lists " + std::to_string(peer->incarnation));
  if (!st.bridge->peers().alive(job.peer_id))
    return make_error(ErrorCode::peer_died, "peer '" + job.peer_id + "' (incarnation " +
                                                std::to_string(peer->incarnation) + ") is dead to us");
  return *peer;
}

// The cached session to the peer; a session to an older incarnation or an unhealthy one is never reused.
protocol::Result<CachedSession*> cached_session(WorkerState& st, const protocol::PeerInfo& peer) {
  auto it = st.sessions.find(peer.instance_id);
  if (it != st.sessions.end()) {
    if (it->second.incarnation == peer.incarnation && it->second.session->healthy()) return &it->second;
    spdlog::info("{}: dropping session #{} to '{}' (incarnation {}): {}", st.config.name, it->second.serial,
                 peer.instance_id, it->second.incarnation,
                 it->second.incarnation != peer.incarnation
                     ? "peer is now incarnation " + std::to_string(peer.incarnation)
                     : std::string("unhealthy"));
    it->second.session->close();
    st.sessions.erase(it);
  }
  auto s = st.engine->open_session(*peer.segment);
  if (!s) return s.error();
  auto [pos, _] = st.sessions.emplace(
      peer.instance_id,
      CachedSession{peer.incarnation, st.next_serial++, s.value(),
                    FailureWindow(st.config.failure_window, st.config.failure_threshold_pct)});
  return &pos->second;
}

void reply(WorkerState& st, caf::event_based_actor* self, InFlight& f, bool ok, protocol::Error error) {
  const auto micros = micros_since(f.started);
  if (micros >
      uint64_t(std::chrono::duration_cast<std::chrono::microseconds>(st.config.slow_threshold).count()))
    spdlog::info("{}: slow transfer: room {} to '{}', {} bytes in {} ms", st.config.name, f.job.room,
                 f.job.peer_id, f.bytes, micros / 1000);
  if (f.dedicated && f.session) f.session->close();
  TransferDone done{f.job.room, f.job.tag, ok, std::move(error), f.bytes, micros, f.attempts};
  self->send(f.job.reply_to, std::move(done));
}

// Submits `id`'s ops, on the cached session or (retry) a freshly opened one of its own. A synchronous
// error replies at once. May throw (fault backend's throw_after_ops): that kills the worker.
void submit(WorkerState& st, caf::event_based_actor* self, uint64_t id, bool fresh_session) {
  InFlight& f = st.inflight[id];
  ++f.attempts;
  auto fail_now = [&](const protocol::Error& e) {
    spdlog::warn("{}: transfer failed: room={} peer='{}' session=none bytes={} attempts={} code={} detail={}",
                 st.config.name, f.job.room, f.job.peer_id, f.bytes, f.attempts, protocol::error_name(e.code),
                 e.detail);
    count_failure(st, f, e.code);
    reply(st, self, f, false, e);
    st.inflight.erase(id);
  };
  auto peer = peer_of(st, f.job);
  if (!peer) return fail_now(peer.error());
  if (fresh_session) {
    auto s = st.engine->open_session(*peer->segment);
    if (!s) return fail_now(s.error());
    f.session = s.value();
    f.serial = st.next_serial++;
    f.dedicated = true;
  } else {
    auto cached = cached_session(st, *peer);
    if (!cached) return fail_now(cached.error());
    f.session = cached.value()->session;
    f.serial = cached.value()->serial;
  }
  const auto posted = clock::now();
  auto batch = f.session->submit(f.job.ops);
  if (!batch) return fail_now(batch.error());
  f.batch = batch.value();
  caf::actor me = caf::actor_cast<caf::actor>(self);
  // Timed here, on the thread that sees the last acknowledgement, not when the worker's mailbox gets to it.
  f.batch->on_complete([me, id, posted, metrics = st.config.metrics, backend = f.session->backend(),
                        peer_role = peer->role, bytes = f.bytes](const protocol::Status& status) {
    if (status.ok() && metrics)
      metrics->delivered(backend, peer_role, std::chrono::duration<double>(clock::now() - posted).count(),
                         bytes);
    if (status.ok())
      caf::anon_send(me, done_atom::value, id, true, protocol::Error{ErrorCode::ok, false, {}});
    else
      caf::anon_send(me, done_atom::value, id, false, status.error());
  });
}

// Counts a first attempt's outcome against its cached session; recycles the session above threshold.
void record_outcome(WorkerState& st, const InFlight& f, bool failed) {
  auto it = st.sessions.find(f.job.peer_id);
  if (f.dedicated || it == st.sessions.end() || it->second.serial != f.serial) return;
  auto& w = it->second.window;
  w.record(failed);
  if (!failed || !w.above_threshold()) return;
  spdlog::warn("{}: recycling session #{} to '{}': {} of its last {} writes failed (threshold {}%)",
               st.config.name, it->second.serial, f.job.peer_id, w.failures(), w.samples(),
               st.config.failure_threshold_pct);
  bump(st.config.counters, &LoadGauge::sessions_recycled);
  it->second.session->close();
  st.sessions.erase(it);
}

caf::behavior worker(caf::stateful_actor<WorkerState>* self, transport::Engine* engine, BridgePtr bridge,
                     TransferWorkerConfig config) {
  harden(self, config.name);
  auto& st = self->state;
  st.engine = engine;
  st.bridge = std::move(bridge);
  st.config = std::move(config);
  // A throw ends this actor (CAF cannot keep it alive). Before it goes, close every session it owns, so
  // nothing it submitted still reads the role's memory once the supervisor reports the crash; the cause
  // becomes the exit reason the supervisor sees in its down_msg.
  self->set_exception_handler([self](caf::scheduled_actor*, std::exception_ptr& eptr) -> caf::error {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(eptr);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    auto& s = self->state;
    // The rooms this crash cut short: the job that threw (no batch yet) and those whose batch still runs.
    // Checked before the sessions close (which fails what still runs). A job whose bytes all landed, or
    // one still in the mailbox, is not hit: the role sends it again to the replacement.
    std::vector<uint64_t> hit;
    for (const auto& [_, f] : s.inflight)
      if (!f.batch || f.batch->poll() != transport::Batch::State::done) hit.push_back(f.job.room);
    std::string rooms;
    for (uint64_t room : hit) rooms += (rooms.empty() ? "" : ", ") + std::to_string(room);
    spdlog::error("{}: crashed with {} job(s) in flight (cut short: room(s) {}): {}", s.config.name,
                  s.inflight.size(), rooms.empty() ? "none" : rooms, what);
    for (auto& [_, f] : s.inflight)
      if (f.session) f.session->close();
    for (auto& [_, c] : s.sessions) c.session->close();
    return caf::make_error(caf::sec::runtime_error, what, std::move(hit));
  });
  // No exit functor touching the state: CAF 0.17 destroys a stateful actor's state before its attached
  // functors run. Destroying the state drops the last references to the sessions, which closes them.
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
        if (f.attempts == 1) record_outcome(s, f, !ok);
        if (!ok && error.retryable && s.config.retry_once && f.attempts == 1) {
          spdlog::warn(
              "{}: room {} to '{}': {} bytes failed on session #{} ({}); retrying once on a fresh session",
              s.config.name, f.job.room, f.job.peer_id, f.bytes, f.serial, error.to_string());
          bump(s.config.counters, &LoadGauge::transfer_retries);
          submit(s, self, id, true);
          return;
        }
        if (!ok) {
          spdlog::warn(
              "{}: transfer failed: room={} peer='{}' session=#{} bytes={} attempts={} code={} detail={}",
              s.config.name, f.job.room, f.job.peer_id, f.serial, f.bytes, f.attempts,
              protocol::error_name(error.code), error.detail);
          count_failure(s, f, error.code);
          drop_session(s, f.job.peer_id);  // the next job starts clean
        }
        if (ok && s.config.counters) s.config.counters->transfer_bytes.fetch_add(f.bytes);
        reply(s, self, f, ok, std::move(error));
        s.inflight.erase(it);
      },
      [=](forget_atom, const std::string& peer_id) {
        auto& s = self->state;
        if (auto it = s.sessions.find(peer_id); it != s.sessions.end())
          spdlog::info("{}: forgetting session #{} to '{}' (incarnation {}): the peer left or restarted",
                       s.config.name, it->second.serial, peer_id, it->second.incarnation);
        drop_session(s, peer_id);
      },
  };
}

}  // namespace

caf::actor spawn_transfer_worker(caf::actor_system& system, transport::Engine& engine, BridgePtr bridge,
                                 TransferWorkerConfig config) {
  const bool detached = config.detached;
  return spawn_worker_actor(system, detached, worker, &engine, std::move(bridge), std::move(config));
}

}  // namespace epd::actors

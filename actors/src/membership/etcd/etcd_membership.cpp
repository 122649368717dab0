#include "epd/actors/membership/etcd_membership.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <set>

#include "epd/actors/membership/membership.hpp"
#include "epd/actors/role_support.hpp"
#include "etcd_agent.hpp"
#include "etcd_membership_actor.hpp"
#include "membership/burst_window.hpp"
#include "membership/compat_gate.hpp"
#include "membership/peer_change_log.hpp"
#include "record_relay.hpp"

namespace epd::actors {
namespace {

using etcd_backend::Changes;
using etcd_backend::Listing;
using etcd_backend::SessionNews;
using protocol::Envelope;
using protocol::MessageType;
using clock = std::chrono::steady_clock;
using revive_atom = caf::atom_constant<caf::atom("revive")>;
using gone_atom = caf::atom_constant<caf::atom("gone")>;
using flush_atom = caf::atom_constant<caf::atom("flush")>;
using etcd_backend::RecordFollower;
using etcd_backend::RecordMirror;

// A new instance that has not sent us a heartbeat since its full list went (from us, or from the router whose
// list it is to send: list_rank). A control connection delivers its frames in order and loses them only when
// it breaks, so a list goes again at the next tick once our connection to the instance broke after it went
// (or, for another router's list, once we lost that router), and otherwise only after a long silence:
// kSilentWait times `backoff`, for what no connection event shows. A shorter wait resent most lists of a
// large start, which saturates every process and delays lists by seconds, and each list resent while the
// first was still on its way was only more for everyone to read.
struct FullSent {
  uint64_t incarnation = 0;
  clock::time_point at;
  unsigned backoff = 1;  // the k-th router to step in starts at k + 1; doubles with each resend
  bool ours = true;      // the last list went from us
  bool lost = false;     // it may have been lost on the way: send it at the next tick
};
constexpr std::chrono::seconds kSilentWait{30};
constexpr unsigned kMaxBackoff = 4;

struct LoadSeen {
  protocol::LoadReport load;
  uint64_t incarnation = 0;
  clock::time_point at;
};

struct EtcdMembershipState {
  BridgePtr bridge;
  EtcdMembershipConfig config;
  std::shared_ptr<LoadGauge> load;
  caf::actor role;
  std::shared_ptr<RegistryView> view;  // routers only
  // The records as etcd holds them (ours included) are the bridge's PeerDirectory: the one copy, since
  // every instance holds every record (a PeerInfo map beside it doubled an instance's memory). What a
  // handler changes waits in `unpublished` (nullopt: gone) until it publishes them as one delta.
  std::map<std::string, std::optional<protocol::PeerInfo>> unpublished;
  std::set<std::string> routers;  // the routers among them: whom the others heartbeat
  // Records etcd deleted while their instance still looked alive to us: removed after a grace period
  // unless put again (a lease that expired during an etcd outage) or the connection to it breaks first.
  std::map<std::string, uint64_t> pending_delete;
  std::map<std::string, LoadSeen> loads;  // routers: the last HEARTBEAT of each instance
  // Routers: whether each instance went into the view healthy, so the tick puts only those whose heartbeats
  // stopped since (not the whole table).
  std::map<std::string, bool> shown_healthy;
  CompatGate gate;  // records of builds we may not work with are not ours to use
  // etcd_watch = "routers". Routers: the records to pass on, when the last delta went, whether one waits.
  std::optional<RecordMirror> mirror;
  clock::time_point last_flush;
  BurstWindow window{std::chrono::milliseconds(0), std::chrono::milliseconds(0)};  // set from the config
  bool flush_waiting = false;
  std::map<std::string, FullSent> full_sent;
  // The others: where we are in the routers' RECORDS, and the routers to ask for a full list.
  std::optional<RecordFollower> follower;
  std::set<std::string> resync_from;  // routers to ask for the full list at our next heartbeat
  bool listed = false;
  uint64_t seq = 0;
  caf::local_actor* self = nullptr;
  clock::time_point now() const { return self->clock().now(); }
  static inline const char* name = "etcd-membership";
};

// The incarnation of `id`'s record, with what this handler changed: nullopt when it has none.
std::optional<uint64_t> record_incarnation(const EtcdMembershipState& st, const std::string& id) {
  if (auto u = st.unpublished.find(id); u != st.unpublished.end())
    return u->second ? std::optional(u->second->incarnation) : std::nullopt;
  auto info = st.bridge->peers().find(id);
  return info ? std::optional(info->incarnation) : std::nullopt;
}

// Every change to the records goes through these two, which keep st.routers with them.
void keep_record(EtcdMembershipState& st, protocol::PeerInfo info) {
  if (info.role == protocol::kRouterRole)
    st.routers.insert(info.instance_id);
  else
    st.routers.erase(info.instance_id);
  const std::string id = info.instance_id;
  st.unpublished[id] = std::move(info);
}

// We lost a router: the lists it was to send may have gone with it, and are ours to send at the next tick.
void router_lost(EtcdMembershipState& st) {
  for (auto& [_, f] : st.full_sent)
    if (!f.ours) f.lost = true;
}

bool drop_record(EtcdMembershipState& st, const std::string& id) {
  if (st.routers.count(id)) router_lost(st);
  st.routers.erase(id);
  // Its heartbeats said nothing about what may come back under its id (an id that changes on every restart
  // must not leave an entry behind each time): a record put again is placed once it beats again.
  st.loads.erase(id);
  if (!record_incarnation(st, id)) return false;
  st.unpublished[id] = std::nullopt;
  return true;
}

std::chrono::milliseconds load_limit(const EtcdMembershipState& st) {
  return st.config.heartbeat_interval * st.config.heartbeat_misses;
}

// What placement may rely on: its last heartbeat is of this incarnation, said healthy and is recent.
bool healthy_now(const EtcdMembershipState& st, const protocol::PeerInfo& info, clock::time_point now) {
  auto l = st.loads.find(info.instance_id);
  return l != st.loads.end() && l->second.incarnation == info.incarnation && l->second.load.healthy &&
         now - l->second.at <= load_limit(st);
}

// `info` is moved in: each caller holds a copy of its own (out of the directory, or a delta it applied).
RegistryEntry entry_of(const EtcdMembershipState& st, protocol::PeerInfo info, clock::time_point now) {
  RegistryEntry e;
  e.last_seen = now;
  auto l = st.loads.find(info.instance_id);
  if (l != st.loads.end() && l->second.incarnation == info.incarnation) {
    e.load = l->second.load;
    e.last_seen = l->second.at;
  }
  e.load.healthy = healthy_now(st, info, now);  // not placed before its first heartbeat, nor once they stop
  e.info = std::move(info);
  return e;
}

// One instance's entry into the view (routers): O(log N).
void show_entry(EtcdMembershipState& st, protocol::PeerInfo info, clock::time_point now) {
  const std::string id = info.instance_id;
  auto e = entry_of(st, std::move(info), now);
  st.shown_healthy[id] = e.load.healthy;
  st.view->put(id, std::move(e));
}

// Per heartbeat tick: instances whose heartbeats stopped turn unhealthy. O(N) comparisons per tick, but only
// the entries whose health changed are put (each is a change the router's placement index follows).
void refresh_health(EtcdMembershipState& st) {
  if (!st.view) return;
  const auto now = st.now();
  for (auto& info : st.bridge->peers().all()) {
    auto shown = st.shown_healthy.find(info.instance_id);
    if (shown == st.shown_healthy.end() || shown->second != healthy_now(st, info, now))
      show_entry(st, std::move(info), now);
  }
}

// The records this handler changed into the peer directory as one delta (the next version), and into the
// view entry by entry: O(log N) per record, whatever N. What changed goes to the role as the PeerChanges a
// PEERS of the embedded registry produces, in the order a full replace() lists them.
void publish(caf::stateful_actor<EtcdMembershipState>* self) {
  auto& st = self->state;
  auto& dir = st.bridge->peers();
  if (st.unpublished.empty() && dir.version() != 0) return;
  std::vector<protocol::PeerInfo> upserts;
  std::vector<std::string> left;
  for (auto& [id, info] : st.unpublished) {
    if (info)
      upserts.push_back(std::move(*info));
    else
      left.push_back(id);
  }
  st.unpublished.clear();
  // Only this actor writes the directory: the next version is always a delta on what it holds.
  auto changes = dir.apply_delta(dir.version() + 1, upserts, left).changes;
  std::sort(changes.begin(), changes.end(), [](const auto& a, const auto& b) {
    const bool a_new = a.old_incarnation == 0, b_new = b.old_incarnation == 0;
    return a_new != b_new ? b_new : a.id < b.id;
  });
  for (const auto& c : changes)
    report_peer_change(c, st.bridge->instance_id(), st.config.metrics.get(), "(its etcd record is gone)");
  if (!changes.empty() && st.role) self->send(st.role, PeerChanges{std::move(changes)});
  if (!st.view) return;
  const auto now = st.now();
  for (auto& info : upserts) show_entry(st, std::move(info), now);  // the directory copied them
  for (const auto& id : left) {
    st.view->erase(id);
    st.shown_healthy.erase(id);
  }
}

// etcd deleted `id`'s record. An instance that is already dead to us (or, in a router, whose heartbeats
// stopped) goes now; one that still looks alive gets a grace period to put its record back (its lease may
// have expired only because etcd was away).
bool on_deleted(caf::stateful_actor<EtcdMembershipState>* self, const std::string& id) {
  auto& st = self->state;
  const auto inc = record_incarnation(st, id);
  if (!inc || id == st.bridge->instance_id()) return false;  // ours: the session re-puts
  // A router also knows from heartbeats: an instance silent for the heartbeat limit is not waiting to
  // register again, it is gone (a router may never have opened a connection to it).
  auto seen = st.loads.find(id);
  const bool silent = st.view && (seen == st.loads.end() || st.now() - seen->second.at > load_limit(st));
  if (!st.bridge->peers().alive(id) || silent) {
    drop_record(st, id);
    st.pending_delete.erase(id);
    return true;
  }
  if (st.pending_delete.emplace(id, *inc).second) {
    spdlog::info(
        "membership: etcd deleted the record of '{}' (incarnation {}), which still answers us; "
        "dropping it in {} ms unless it registers again",
        id, *inc, st.config.lease_ttl.count());
    self->delayed_send(self, st.config.lease_ttl, gone_atom::value, id, *inc);
  }
  return false;
}

bool on_put(EtcdMembershipState& st, protocol::PeerInfo info) {
  const std::string id = info.instance_id;
  if (id != st.bridge->instance_id() && st.gate.check(id, info.role, info.incarnation, info.identity)) {
    // Refused (it refuses us too: the check is symmetric): as if it had no record; one it replaced goes.
    st.pending_delete.erase(id);
    return drop_record(st, id);
  }
  if (auto p = st.pending_delete.find(id); p != st.pending_delete.end()) {
    if (p->second == info.incarnation)
      spdlog::info("membership: '{}' registered again with the same incarnation; nothing changed", id);
    st.pending_delete.erase(p);
  }
  if (auto u = st.unpublished.find(id);
      u != st.unpublished.end() ? u->second == info : st.bridge->peers().lists(info))
    return false;
  keep_record(st, std::move(info));
  return true;
}

// The whole membership as listed (by our watch, or by a router's full RECORDS).
void apply_listing(caf::stateful_actor<EtcdMembershipState>* self, Listing listing) {
  auto& st = self->state;
  std::set<std::string> listed;
  bool changed = false;
  for (auto& info : listing.peers) {
    listed.insert(info.instance_id);
    changed = on_put(st, std::move(info)) || changed;
  }
  for (const auto& [id, _] : st.bridge->peers().incarnations())
    if (!listed.count(id)) changed = on_deleted(self, id) || changed;
  if (!st.listed)
    spdlog::info("membership: {} instance(s) in etcd at revision {}", listed.size(), listing.revision);
  st.listed = true;
  if (changed) publish(self);
  if (st.bridge->peers().version() == 0) publish(self);  // an empty etcd: listed all the same
}

// Watch events, in etcd's order (ours, or a router's delta RECORDS).
void apply_changes(caf::stateful_actor<EtcdMembershipState>* self, Changes changes) {
  auto& st = self->state;
  for (auto& c : changes.changes) {
    if (c.info)
      on_put(st, std::move(*c.info));
    else
      on_deleted(self, c.id);
  }
  publish(self);
}

void send_heartbeats(EtcdMembershipState& st) {
  protocol::Heartbeat hb;
  hb.seq = ++st.seq;
  hb.load = st.load->snapshot();
  hb.load.healthy = hb.load.healthy && st.listed;  // cannot serve before it knows its peers
  if (st.config.engine) hb.load.fenced_writes = st.config.engine->fence_stats().refused;
  // Instances tell the routers their load. A router sends its heartbeat to every instance in turn: nobody
  // needs a router's load, but the control connection it keeps open that way is what notices a killed
  // instance in milliseconds (its kernel closes the connection). Without it, a router that never sent an
  // instance anything would learn of its death only when its heartbeats went silent, which is how a frozen
  // one shows (links with a router run no ZMTP heartbeats: LivenessConfig).
  // A router's says how far its RECORDS went: to the instances it sends them, and to the other routers
  // (RecordMirror::router_sent). Frames that differ only in that are encoded once for all who get them.
  std::map<uint64_t, std::vector<std::string>> alike;  // by records_revision
  auto send = [&](const std::string& id, const protocol::PeerInfo& info) {
    if (!st.bridge->peers().alive(id)) return;
    uint64_t revision = 0;
    if (st.mirror) revision = st.routers.count(id) ? st.mirror->flushed_to() : st.mirror->sent_up_to(id);
    if (st.mirror && st.mirror->list_pending(id)) revision = 0;  // nothing to compare with yet
    if (!st.resync_from.erase(id)) {
      alike[revision].push_back(info.control_endpoint);
      return;
    }
    auto own = hb;  // we lost RECORDS from this router
    own.resync = true;
    own.records_revision = revision;
    st.bridge->send_to_endpoint(info.control_endpoint, std::move(own));
  };
  if (st.view) {  // a router: to every instance
    for (const auto& info : st.bridge->peers().all()) send(info.instance_id, info);
  } else {
    for (const auto& id : st.routers)  // the others: to the routers only, not a walk over all N records
      if (auto info = st.bridge->peers().find(id)) send(id, *info);
  }
  for (auto& [revision, to] : alike) {
    hb.records_revision = revision;
    st.bridge->send_to_endpoints(to, hb);
  }
}

// ---- etcd_watch = "routers"
// --------------------------------------------------------------------------------

// RECORDS to `to`, encoded once; counted in config.records_bytes when the bench asks.
void send_records(EtcdMembershipState& st, const std::vector<std::string>& to, protocol::Records records) {
  const size_t bytes = st.bridge->send_to_endpoints(to, std::move(records));
  if (st.config.records_bytes) *st.config.records_bytes += uint64_t(bytes) * to.size();
}

// Remembers that `id`'s full list went now (from us, or, `rank` > 0, from another router), so that we send
// it (again) if it stays silent: the k-th router to step in waits k + 1 times as long as the first.
void sent_full(EtcdMembershipState& st, const std::string& id, clock::time_point now, size_t rank = 0) {
  const auto* info = st.mirror->member(id);
  if (!info) return;
  auto& f = st.full_sent[id];
  if (f.incarnation != info->incarnation) {
    f = FullSent{info->incarnation, now, unsigned(rank + 1), rank == 0};
    return;
  }
  f.at = now;
  f.lost = false;
  f.ours = f.ours || rank == 0;
}

// `id` (of `incarnation`) sent us a heartbeat: it holds a list.
void heard_from(EtcdMembershipState& st, const std::string& id, uint64_t incarnation) {
  auto f = st.full_sent.find(id);
  if (f != st.full_sent.end() && f->second.incarnation == incarnation) st.full_sent.erase(f);
}

// Our connection to `id` (of `incarnation`) broke: a list we sent it may have gone with the frames queued on
// that connection. It goes again at the next tick.
void list_may_be_lost(EtcdMembershipState& st, const std::string& id, uint64_t incarnation) {
  auto f = st.full_sent.find(id);
  if (f != st.full_sent.end() && f->second.incarnation == incarnation && f->second.ours)
    f->second.lost = true;
}

// Which other routers do not serve now (check_routers).
void update_routers_down(EtcdMembershipState& st) {
  const auto now = st.now();
  std::set<std::string> down;
  for (const auto& id : st.routers) {
    if (id == st.bridge->instance_id()) continue;
    auto seen = st.loads.find(id);
    const bool silent = seen != st.loads.end() && now - seen->second.at > load_limit(st);
    if (silent || !st.bridge->peers().alive(id)) down.insert(id);
  }
  st.mirror->set_down(std::move(down));
}

// The events gathered since the last flush: one delta to the instances that hold a list, the full list to
// the new ones whose list is ours to send.
void flush_records(caf::stateful_actor<EtcdMembershipState>* self) {
  auto& st = self->state;
  update_routers_down(st);
  st.flush_waiting = false;
  st.last_flush = st.now();
  auto f = st.mirror->flush();
  send_records(st, f.delta_to, std::move(f.delta));
  send_records(st, f.catch_up_to, std::move(f.catch_up));
  for (const auto& [id, rank] : f.awaited) sent_full(st, id, st.last_flush, rank);
  if (f.full_to.empty()) return;
  send_records(st, f.full_to, st.mirror->full());
  for (const auto& id : f.full_ids) sent_full(st, id, st.last_flush);
}

// Other routers' instances are ours to send RECORDS while they do not serve (their instances would hear
// nothing): when our connection to one broke, or its heartbeats stopped. One not heard from yet serves: it
// sends every instance its full list when it starts, and its instances' deltas from there.
void check_routers(caf::stateful_actor<EtcdMembershipState>* self) {
  auto& st = self->state;
  if (!st.mirror) return;
  update_routers_down(st);
  if (st.mirror->needs_flush() && !st.flush_waiting) flush_records(self);  // at once: instances moved
}

// A lone event goes at once; those that follow within the window wait for its end, together (BurstWindow).
void schedule_flush(caf::stateful_actor<EtcdMembershipState>* self) {
  auto& st = self->state;
  if (st.flush_waiting || !st.mirror->pending()) return;
  const auto wait = st.window.wait(st.last_flush, st.now());
  if (wait == clock::duration::zero()) return flush_records(self);
  st.flush_waiting = true;
  self->delayed_send(self, std::chrono::duration_cast<std::chrono::milliseconds>(wait), flush_atom::value);
}

// The full list again to instances that have sent no heartbeat since theirs (lost, or they were slow).
void resend_full_lists(EtcdMembershipState& st) {
  const auto now = st.now();
  std::optional<protocol::Records> full;  // made once per tick, if anyone needs it
  for (auto it = st.full_sent.begin(); it != st.full_sent.end();) {
    auto& [id, f] = *it;
    const auto* info = st.mirror->member(id);
    auto seen = st.loads.find(id);
    const bool heard = seen != st.loads.end() && seen->second.incarnation == f.incarnation;
    if (!info || info->incarnation != f.incarnation || heard) {
      it = st.full_sent.erase(it);
      continue;
    }
    if (f.lost || now - f.at >= kSilentWait * f.backoff) {
      spdlog::info("membership: '{}' sent no heartbeat {} ms after its list of instances went{}; sending it",
                   id, std::chrono::duration_cast<std::chrono::milliseconds>(now - f.at).count(),
                   f.lost ? " and it may have been lost" : "");
      if (!full) full = st.mirror->full();
      send_records(st, {info->control_endpoint}, *full);
      f.at = now;
      f.ours = true;
      f.lost = false;
      f.backoff = std::min(f.backoff * 2, kMaxBackoff);
    }
    ++it;
  }
}

caf::behavior etcd_membership(caf::stateful_actor<EtcdMembershipState>* self, BridgePtr bridge,
                              EtcdMembershipConfig config, std::shared_ptr<LoadGauge> load, caf::actor role,
                              std::shared_ptr<RegistryView> view) {
  harden(self, "etcd-membership");
  auto& st = self->state;
  st.self = self;
  st.bridge = std::move(bridge);
  st.config = std::move(config);
  st.load = std::move(load);
  st.role = std::move(role);
  st.view = std::move(view);
  st.gate = CompatGate(st.bridge->instance_id(), st.config.self.identity, st.config.metrics);
  st.window = BurstWindow(st.config.records_window, st.config.records_window_max);
  if (st.config.routers_watch) {
    if (st.view)
      st.mirror.emplace(st.bridge->instance_id());
    else
      st.follower.emplace();
  }
  self->delayed_send(self, st.config.heartbeat_interval, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& s = self->state;
        check_routers(self);  // before the heartbeats, which say how far our RECORDS went
        send_heartbeats(s);
        refresh_health(s);  // instances whose heartbeats stopped turn unhealthy
        if (s.mirror) resend_full_lists(s);
        self->delayed_send(self, s.config.heartbeat_interval, tick_atom::value);
      },
      [=](Listing& listing) {
        auto& s = self->state;
        if (s.mirror) {  // a router that passes the records on: everyone gets the new list
          update_routers_down(s);
          const auto to = s.mirror->list(listing);
          send_records(s, to, s.mirror->full());
          for (const auto& id : s.mirror->members()) sent_full(s, id, s.now());
        }
        apply_listing(self, std::move(listing));
      },
      [=](Changes& changes) {
        auto& s = self->state;
        if (s.mirror) s.mirror->watch(changes);
        apply_changes(self, std::move(changes));
        if (s.mirror) schedule_flush(self);
      },
      [=](flush_atom) { flush_records(self); },
      [=](gone_atom, const std::string& id, uint64_t incarnation) {
        auto& s = self->state;
        auto p = s.pending_delete.find(id);
        if (p == s.pending_delete.end() || p->second != incarnation) return;
        s.pending_delete.erase(p);
        if (record_incarnation(s, id) != incarnation) return;
        spdlog::warn("membership: '{}' did not register again within {} ms; dropped", id,
                     s.config.lease_ttl.count());
        drop_record(s, id);
        publish(self);
      },
      [=](SessionNews& news) {
        if (!news.registered) spdlog::warn("membership: etcd session in trouble: {}", news.detail);
      },
      [=](revive_atom, const std::string& id, uint64_t incarnation) {
        auto& s = self->state;
        if (record_incarnation(s, id) != incarnation || s.pending_delete.count(id)) return;
        if (s.bridge->peers().revive(id, incarnation))
          spdlog::info(
              "membership: peer '{}' (incarnation {}) still holds its etcd lease after our connection to it "
              "broke; using it again",
              id, incarnation);
      },
      [=](PeerEvent& ev) {
        auto& s = self->state;
        if (ev.id.empty() || ev.id == s.bridge->instance_id()) return;
        if (ev.new_incarnation == 0 && s.routers.count(ev.id))
          router_lost(s);
        else if (ev.new_incarnation == 0)
          list_may_be_lost(s, ev.id, ev.old_incarnation);
        if (!s.bridge->peers().mark_dead(ev.id, ev.old_incarnation)) return;  // already known
        if (s.routers.count(ev.id)) check_routers(self);                      // its instances are ours now
        const std::string role = s.bridge->peers().role_of(ev.id);
        if (s.config.metrics) s.config.metrics->peer_lost(role, "connection");
        spdlog::warn("membership: peer '{}' (incarnation {}) is dead to us: {}", ev.id, ev.old_incarnation,
                     ev.reason);
        if (s.role) self->send(s.role, PeerChanges{{{ev.id, ev.old_incarnation, ev.new_incarnation, role}}});
        if (auto p = s.pending_delete.find(ev.id);
            p != s.pending_delete.end() && p->second == ev.old_incarnation) {
          // etcd already dropped it and now its connection broke too: gone, no grace needed.
          s.pending_delete.erase(p);
          drop_record(s, ev.id);
          publish(self);
          return;
        }
        // Only our connection broke: if it still holds its lease once that would have expired, it lives
        // (a stall of ours or a one-sided break): use it again then.
        if (ev.new_incarnation == 0)
          self->delayed_send(self, s.config.lease_ttl + load_limit(s), revive_atom::value, ev.id,
                             ev.old_incarnation);
      },
      [=](Envelope& env) {
        auto& s = self->state;
        if (auto* records = std::get_if<protocol::Records>(&env.body); records && s.follower) {
          const uint64_t since = records->since;
          auto step = s.follower->take(env.sender, std::move(*records));
          if (step.listing) apply_listing(self, std::move(*step.listing));
          if (step.changes) apply_changes(self, std::move(*step.changes));
          if (step.gap)
            spdlog::debug("membership: RECORDS from '{}' start at revision {}, after ours ({})", env.sender,
                          since, s.follower->revision());
          return;
        }
        auto* hb = std::get_if<protocol::Heartbeat>(&env.body);
        // A router's heartbeat comes after every RECORDS it sent us before it (one connection): if it has
        // sent more than we hold (still, at its next heartbeat), some were lost, maybe the last of a burst,
        // after which no delta comes to show a gap. Before our first list there is nothing to compare.
        if (hb && s.follower && s.follower->short_of(env.sender, hb->records_revision) &&
            s.resync_from.insert(env.sender).second)
          spdlog::info(
              "membership: router '{}' sent RECORDS up to revision {}, we hold {}; asking it for the full "
              "list",
              env.sender, hb->records_revision, s.follower->revision());
        if (!hb || !s.view) return;
        if (hb->resync && s.mirror) {
          if (const auto* info = s.mirror->member(env.sender)) {
            send_records(s, {info->control_endpoint}, s.mirror->full());
            sent_full(s, env.sender, s.now());
          }
        }
        auto info = s.bridge->peers().find(env.sender);
        // Not (yet) in our watch, or an older incarnation: its next heartbeat counts.
        if (!info || info->incarnation != env.incarnation) return;
        const auto now = s.now();
        if (s.mirror) heard_from(s, env.sender, env.incarnation);
        if (s.mirror && s.routers.count(env.sender)) s.mirror->router_sent(env.sender, hb->records_revision);
        auto& seen = s.loads[env.sender];
        seen = {hb->load, env.incarnation, now};
        show_entry(s, std::move(*info), now);
      },
  };
}

class EtcdMembershipImpl final : public EtcdMembership {
 public:
  EtcdMembershipImpl(caf::actor actor, std::unique_ptr<etcd_backend::Agent> agent)
      : actor_(std::move(actor)), agent_(std::move(agent)) {}
  ~EtcdMembershipImpl() override { stop(); }
  caf::actor actor() const override { return actor_; }
  void stop() override { end(true); }
  void abandon() override { end(false); }

 private:
  void end(bool revoke) {
    if (agent_) agent_->stop(revoke);
    agent_.reset();
    if (actor_) caf::anon_send_exit(actor_, caf::exit_reason::user_shutdown);
  }

  caf::actor actor_;
  std::unique_ptr<etcd_backend::Agent> agent_;
};

}  // namespace

protocol::Result<caf::actor> etcd_backend::spawn_etcd_membership(caf::actor_system& system, BridgePtr bridge,
                                                                 EtcdMembershipConfig config,
                                                                 std::shared_ptr<LoadGauge> load,
                                                                 caf::actor role,
                                                                 std::shared_ptr<RegistryView> view) {
  const bool follows = config.routers_watch && !view;  // takes RECORDS from the routers
  auto a = system.spawn(etcd_membership, bridge, std::move(config), std::move(load), std::move(role),
                        std::move(view));
  // Every instance takes HEARTBEATs: routers keep the loads in them, the others drop the routers' ones.
  if (auto st = bridge->subscribe(MessageType::heartbeat, a); !st) {
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    return st.error();
  }
  if (auto st = follows ? bridge->subscribe(MessageType::records, a) : protocol::Status{}; !st) {
    caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    return st.error();
  }
  bridge->subscribe_liveness(a);
  return a;
}

protocol::Result<std::unique_ptr<EtcdMembership>> start_etcd_membership(
    caf::actor_system& system, BridgePtr bridge, EtcdMembershipConfig config, std::shared_ptr<LoadGauge> load,
    caf::actor role, std::shared_ptr<RegistryView> view) {
  auto client = etcd::EtcdClient::create({config.endpoints, config.request_timeout, config.traffic});
  if (!client) return client.error();
  etcd_backend::AgentConfig ac;
  ac.prefix = config.prefix;
  ac.lease_ttl = config.lease_ttl;
  ac.watch_idle = std::max(std::chrono::milliseconds(30000), config.lease_ttl * 10);
  ac.watch = !config.routers_watch || view != nullptr;
  ac.keeper = config.keeper;
  protocol::PeerInfo self_record = config.self;
  auto spawned = etcd_backend::spawn_etcd_membership(system, std::move(bridge), std::move(config),
                                                     std::move(load), std::move(role), std::move(view));
  if (!spawned) return spawned.error();
  auto a = std::move(spawned).value();
  auto agent = std::make_unique<etcd_backend::Agent>(std::move(*client), ac, std::move(self_record), a);
  agent->start();
  return std::unique_ptr<EtcdMembership>(new EtcdMembershipImpl(a, std::move(agent)));
}

}  // namespace epd::actors

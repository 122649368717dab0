#include "epd/actors/membership/membership.hpp"

#include <spdlog/spdlog.h>

#include <random>

#include "epd/actors/role_support.hpp"
#include "membership/compat_gate.hpp"
#include "membership/peer_change_log.hpp"

namespace epd::actors {
namespace {

using protocol::Envelope;
using protocol::MessageType;
using clock = std::chrono::steady_clock;
using drained_atom = caf::atom_constant<caf::atom("drained")>;
using revive_atom = caf::atom_constant<caf::atom("revive")>;

// registering: HELLO every tick until acknowledged; registered: HEARTBEAT every tick; rejoining: the
// registry dropped us, the role is failing what it held, HELLO (new incarnation) once it holds nothing.
enum class Phase { registering, registered, rejoining };

struct MembershipState {
  BridgePtr bridge;
  MembershipConfig config;
  std::shared_ptr<LoadGauge> load;
  caf::actor role;
  Phase phase = Phase::registering;
  bool have_peers = false;  // a full PEERS list arrived since the last HELLO
  bool want_full = false;   // a PEERS delta skipped a version: ask for the full list until it comes
  uint64_t seq = 0;
  clock::time_point rejoin_started;
  CompatGate gate;
  std::string refused_because;  // the registry's last refusal, logged when it changes
  static inline const char* name = "membership";
};

void send_hello(MembershipState& st) {
  protocol::Hello hello;
  hello.role = st.config.role;
  hello.control_endpoint = st.bridge->endpoint();
  // The engine's current descriptor: its token changes when we rejoin.
  hello.segment = st.config.engine ? std::optional(st.config.engine->descriptor()) : st.config.segment;
  hello.kv_layout = st.config.kv_layout;
  hello.kv_pages_total = st.config.kv_pages_total;
  hello.identity = st.config.identity;
  st.bridge->send_to_endpoint(st.config.registry_endpoint, std::move(hello));
}

void send_heartbeat(MembershipState& st) {
  protocol::Heartbeat hb;
  hb.seq = ++st.seq;
  hb.load = st.load->snapshot();
  hb.load.healthy = hb.load.healthy && st.have_peers;  // cannot serve before it knows its peers
  // A gap, or registered without the full list that answers HELLO (lost, or not here a tick later): ask.
  hb.resync = st.want_full || !st.have_peers;
  // So that the registry can see a delta lost with no later one to show the gap.
  if (st.have_peers) hb.peers_version = st.bridge->peers().version();
  if (st.config.engine) hb.load.fenced_writes = st.config.engine->fence_stats().refused;
  st.bridge->send_to_endpoint(st.config.registry_endpoint, hb);
}

// How often a rejoin checks whether the role let go of its last room: fast, so that the instance is back
// well within two heartbeat intervals of waking.
std::chrono::milliseconds drain_poll(const MembershipState& st) {
  return std::max(std::chrono::milliseconds(2), st.config.heartbeat_interval / 50);
}

// The registry dropped us: every peer has failed what it shared with us. Fail and free it here too.
void start_rejoin(caf::stateful_actor<MembershipState>* self, const std::string& why) {
  auto& st = self->state;
  st.phase = Phase::rejoining;
  st.have_peers = false;
  st.want_full = false;
  st.rejoin_started = clock::now();
  auto gone = st.bridge->peers().forget_all();
  spdlog::warn(
      "membership: {} (incarnation {}); failing what we held ({} room(s), {} peer(s) forgotten) "
      "and rejoining as a new incarnation",
      why, st.bridge->incarnation(), st.load->active_rooms.load(), gone.size());
  if (st.role && !gone.empty()) self->send(st.role, PeerChanges{std::move(gone)});
  self->send(self, drained_atom::value);
}

// Once no write of ours is in flight, nothing of the old incarnation can land in a peer's memory any more:
// register as a new one.
void continue_rejoin(caf::stateful_actor<MembershipState>* self) {
  auto& st = self->state;
  if (st.phase != Phase::rejoining) return;
  if (st.load->writes_in_flight.load() > 0) {
    self->delayed_send(self, drain_poll(st), drained_atom::value);
    return;
  }
  const uint64_t old = st.bridge->incarnation();
  st.bridge->set_incarnation(fresh_incarnation(old));
  // Whoever held the old incarnation's descriptor (a peer that never heard we were dropped, or whoever
  // learned it while we were stalled) can no longer write here: the new token goes only to registered peers.
  if (st.config.engine) st.config.engine->rotate_token();
  st.phase = Phase::registering;
  spdlog::info("membership: rejoining as incarnation {} (was {}) after {} ms of draining",
               st.bridge->incarnation(), old, micros_since(st.rejoin_started) / 1000);
  send_hello(st);
}

// A full list replaces the directory; a delta applies on top of the previous version, or, after a gap, waits
// for the full list the next HEARTBEAT asks for.
// PEERS without the members we may not work with. A registry checks every HELLO against its own build, but
// two builds it accepts need not accept each other (revision ranges overlap pairwise, not as a chain).
protocol::Peers compatible_only(MembershipState& st, const protocol::Peers& peers) {
  protocol::Peers out;
  out.version = peers.version;
  out.full = peers.full;
  out.left = peers.left;
  for (const auto& p : peers.peers) {
    if (p.instance_id == st.bridge->instance_id() ||
        !st.gate.check(p.instance_id, p.role, p.incarnation, p.identity))
      out.peers.push_back(p);
    else if (!peers.full)
      out.left.push_back(p.instance_id);  // restarted into a build we refuse: its old incarnation is gone too
  }
  return out;
}

void on_peers(caf::stateful_actor<MembershipState>* self, const protocol::Peers& listed) {
  auto& st = self->state;
  if (st.phase == Phase::rejoining) return;  // addressed to the incarnation we are leaving
  const protocol::Peers peers = compatible_only(st, listed);
  std::vector<PeerDirectory::Change> changes;
  if (peers.full) {
    st.have_peers = true;
    st.want_full = false;
    changes = st.bridge->peers().replace(peers.version, peers.peers);
  } else {
    if (!st.have_peers) return;  // the full list answering our HELLO is on its way
    auto applied = st.bridge->peers().apply_delta(peers.version, peers.peers, peers.left);
    if (applied.gap) {
      if (!st.want_full) {
        spdlog::warn("membership: PEERS version {} after {}: a delta was lost; asking for the full list",
                     peers.version, st.bridge->peers().version());
        st.want_full = true;
        if (st.phase == Phase::registered) send_heartbeat(st);  // ask now, not a heartbeat interval later
      }
      return;
    }
    changes = std::move(applied.changes);
  }
  for (const auto& c : changes) report_peer_change(c, st.bridge->instance_id(), st.config.metrics.get(), "");
  if (!changes.empty() && st.role) self->send(st.role, PeerChanges{std::move(changes)});
}

caf::behavior membership(caf::stateful_actor<MembershipState>* self, BridgePtr bridge,
                         MembershipConfig config, std::shared_ptr<LoadGauge> load, caf::actor role) {
  harden(self, "membership");
  auto& st = self->state;
  st.bridge = std::move(bridge);
  st.config = std::move(config);
  st.load = std::move(load);
  st.role = std::move(role);
  st.gate = CompatGate(st.bridge->instance_id(), st.config.identity, st.config.metrics);
  // Subscribed before the first HELLO: its answer can come back at once (a router that hosts the registry).
  const auto me = caf::actor_cast<caf::actor>(self);
  // Role handler tables cannot take membership messages (MessageTable refuses them at compile time).
  for (auto t : {MessageType::hello_ack, MessageType::peers})
    if (auto sub = st.bridge->subscribe(t, me); !sub)
      spdlog::critical("membership: {}", sub.error().to_string());
  st.bridge->subscribe_errors_about(MessageType::heartbeat, me);
  st.bridge->subscribe_errors_about(MessageType::hello, me);
  st.bridge->subscribe_liveness(me);
  send_hello(st);
  self->delayed_send(self, st.config.heartbeat_interval, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& s = self->state;
        // Until the registry acknowledged us, every tick is another HELLO (the registry may start later).
        if (s.phase == Phase::registered)
          send_heartbeat(s);
        else if (s.phase == Phase::registering)
          send_hello(s);
        self->delayed_send(self, s.config.heartbeat_interval, tick_atom::value);
      },
      [=](drained_atom) { continue_rejoin(self); },
      [=](revive_atom, const std::string& id, uint64_t incarnation) {
        auto& s = self->state;
        if (s.phase == Phase::registered && s.bridge->peers().revive(id, incarnation))
          spdlog::info(
              "membership: peer '{}' (incarnation {}) is still registered after our connection to it "
              "broke; using it again",
              id, incarnation);
      },
      [=](PeerEvent& ev) {
        auto& s = self->state;
        if (ev.id.empty() || ev.id == s.bridge->instance_id()) {
          if (ev.endpoint == s.config.registry_endpoint)
            spdlog::warn("membership: {}; heartbeats will reconnect", ev.reason);
          return;
        }
        if (!s.bridge->peers().mark_dead(ev.id, ev.old_incarnation)) return;  // already known
        const std::string role = s.bridge->peers().role_of(ev.id);
        if (s.config.metrics) s.config.metrics->peer_lost(role, "connection");
        spdlog::warn("membership: peer '{}' (incarnation {}) is dead to us: {}", ev.id, ev.old_incarnation,
                     ev.reason);
        // Only our connection broke: if the registry still lists that incarnation once it would have
        // expired it, the peer lives (a stall of ours or a one-sided break): use it again then.
        if (ev.new_incarnation == 0)
          self->delayed_send(self, s.config.heartbeat_interval * (s.config.heartbeat_misses + 2),
                             revive_atom::value, ev.id, ev.old_incarnation);
        if (s.role) self->send(s.role, PeerChanges{{{ev.id, ev.old_incarnation, ev.new_incarnation, role}}});
      },
      [=](Envelope& env) {
        auto& s = self->state;
        if (auto* ack = std::get_if<protocol::HelloAck>(&env.body)) {
          // Both sides decide: we do not register with a registry we may not work with, whatever it said.
          if (s.gate.check(env.sender, "registry", env.incarnation, ack->identity)) return;
          if (!ack->accepted) {
            // Said once per reason: a refused instance keeps saying HELLO (the registry may be upgraded).
            if (ack->reason != s.refused_because)
              spdlog::error("membership: the registry '{}' refused our HELLO: {}", env.sender, ack->reason);
            s.refused_because = ack->reason;
            return;
          }
          s.refused_because.clear();
          if (s.phase == Phase::rejoining) return;  // an ACK of the old incarnation's HELLO
          if (s.phase == Phase::registering)
            spdlog::info("membership: registered with the registry ({}) as incarnation {}", env.sender,
                         s.bridge->incarnation());
          s.phase = Phase::registered;
        } else if (auto* peers = std::get_if<protocol::Peers>(&env.body)) {
          on_peers(self, *peers);
        } else if (auto* err = std::get_if<protocol::ErrorReply>(&env.body)) {
          if (err->code == protocol::ErrorCode::unknown_peer) {
            // The registry lost us (it expired us after a stall, or it restarted). Its answer to a HEARTBEAT
            // of an incarnation we already left (or to a HELLO) changes nothing.
            if (s.phase == Phase::registered)
              start_rejoin(self, "the registry '" + env.sender + "' dropped us (" + err->detail + ")");
          } else {
            spdlog::warn("membership: ERROR from {}: {} {}", env.sender, protocol::error_name(err->code),
                         err->detail);
          }
        }
      },
  };
}

}  // namespace

uint64_t fresh_incarnation(uint64_t after) {
  const uint64_t t = uint64_t(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  std::chrono::system_clock::now().time_since_epoch())
                                  .count());
  const uint64_t fresh = (t << 16) | (std::random_device{}() & 0xffff);
  return std::max(fresh, after + 1);
}

caf::actor spawn_membership(caf::actor_system& system, BridgePtr bridge, MembershipConfig config,
                            std::shared_ptr<LoadGauge> load, caf::actor role) {
  return system.spawn(membership, std::move(bridge), std::move(config), std::move(load), std::move(role));
}

}  // namespace epd::actors

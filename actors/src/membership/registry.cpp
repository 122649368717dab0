#include "membership/registry.hpp"

#include <spdlog/spdlog.h>

#include <set>
#include <utility>

#include "epd/actors/role_support.hpp"
#include "membership/burst_window.hpp"
#include "membership/compat_gate.hpp"
#include "membership/list_resend.hpp"

namespace epd::actors {
namespace {

using protocol::Envelope;
using protocol::ErrorCode;
using protocol::MessageType;
using clock = std::chrono::steady_clock;

struct RegistryState {
  BridgePtr bridge;
  RegistryConfig config;
  std::shared_ptr<RegistryView> view;
  std::map<std::string, RegistryEntry> entries;
  uint64_t version = 0;
  caf::event_based_actor* self = nullptr;
  clock::time_point last_tick;
  CompatGate gate;
  // Changes not yet sent: the ids whose entry changed (listed now: an upsert; gone: left), and the ids that
  // joined (they get the full list instead). Sent by one `peers_atom` message the actor sends itself at the
  // first change, at once or at the end of the publish window: everything that arrives until then (a burst
  // of HELLOs at a cluster's start, a rack's kills) goes out as one delta per member, not one per change.
  std::set<std::string> changed, joiners;
  bool flush_queued = false;
  clock::time_point last_flush{};
  BurstWindow window{std::chrono::milliseconds(0), std::chrono::milliseconds(0)};  // set from the config
  ListResend resend{clock::duration(0)};  // when a member gets the full list again; set from the config
  // The actor system's clock (steady_clock; simulated under the test coordinator, so expiry is testable).
  clock::time_point now() const { return self->clock().now(); }
  static inline const char* name = "registry";
};

protocol::Peers full_list(const RegistryState& st) {
  protocol::Peers peers;
  peers.version = st.version;
  peers.peers.reserve(st.entries.size());
  for (const auto& [_, e] : st.entries) peers.peers.push_back(e.info);
  return peers;
}

// One membership change: `joined` (a new or restarted member, which gets the full list) or `left`. The view
// changes now; the members hear of it in the next flush (a delta for all but the joiners).
void publish(RegistryState& st, const std::optional<std::string>& joined,
             const std::optional<std::string>& left) {
  if (st.config.full_lists) {
    ++st.version;
    st.view->set(st.entries);
    const auto peers = full_list(st);
    for (const auto& [_, e] : st.entries) st.bridge->send_to_endpoint(e.info.control_endpoint, peers);
    return;
  }
  if (joined) {
    st.view->upsert(st.entries.at(*joined));
    st.changed.insert(*joined);
    st.joiners.insert(*joined);
  }
  if (left) {
    st.view->erase(*left);
    st.changed.insert(*left);
    st.joiners.erase(*left);
  }
  if (std::exchange(st.flush_queued, true)) return;
  // A lone change goes out at once; in a burst, at most one version per window (BurstWindow).
  const auto wait = st.window.wait(st.last_flush, st.now());
  if (wait == clock::duration::zero())
    st.self->send(st.self, peers_atom::value);
  else
    st.self->delayed_send(st.self, wait, peers_atom::value);
}

// Every change since the last flush as one version: the joiners get the full list, everyone else one delta.
void flush(RegistryState& st) {
  st.flush_queued = false;
  st.last_flush = st.now();
  if (st.changed.empty()) return;
  ++st.version;
  protocol::Peers delta;
  delta.version = st.version;
  delta.full = false;
  for (const auto& id : st.changed)
    if (auto it = st.entries.find(id); it != st.entries.end())
      delta.peers.push_back(it->second.info);
    else
      delta.left.push_back(id);
  std::optional<protocol::Peers> full;
  if (!st.joiners.empty()) full = full_list(st);
  std::vector<std::string> to_joiners, to_others;
  for (const auto& [id, e] : st.entries)
    (st.joiners.count(id) ? to_joiners : to_others).push_back(e.info.control_endpoint);
  st.bridge->send_to_endpoints(to_others, std::move(delta));
  if (full) {
    st.bridge->send_to_endpoints(to_joiners, std::move(*full));
    for (const auto& id : st.joiners) st.resend.sent(id, st.version, st.last_flush);
    if (st.config.metrics) st.config.metrics->lists_sent("joined", to_joiners.size());
  }
  st.changed.clear();
  st.joiners.clear();
}

protocol::HelloAck ack(const RegistryState& st, bool accepted, std::string reason = "") {
  return {accepted, std::move(reason), uint32_t(st.config.heartbeat_interval.count()), st.gate.ours()};
}

void remove(RegistryState& st, std::map<std::string, RegistryEntry>::iterator it);

void on_hello(RegistryState& st, const Envelope& env, const protocol::Hello& hello) {
  auto it = st.entries.find(env.sender);
  if (auto bad = st.gate.check(env.sender, hello.role, env.incarnation, hello.identity)) {
    st.bridge->send_to_endpoint(hello.control_endpoint, ack(st, false, bad->reason));
    // Listed under an earlier incarnation and restarted into an incompatible build: that one is gone.
    if (it != st.entries.end()) remove(st, it);
    return;
  }
  if (it != st.entries.end() && it->second.info.incarnation == env.incarnation &&
      it->second.info.control_endpoint == hello.control_endpoint) {
    // A repeated HELLO (our ACK was lost): acknowledge again, nothing changed.
    st.bridge->send_to_endpoint(hello.control_endpoint, ack(st, true));
    it->second.last_seen = st.now();
    return;
  }
  if (it != st.entries.end())
    spdlog::info("registry: '{}' re-registered (incarnation {} -> {})", env.sender,
                 it->second.info.incarnation, env.incarnation);
  else
    spdlog::info("registry: '{}' registered as {} at {}", env.sender, hello.role, hello.control_endpoint);
  RegistryEntry e;
  e.info.instance_id = env.sender;
  e.info.role = hello.role;
  e.info.control_endpoint = hello.control_endpoint;
  e.info.incarnation = env.incarnation;
  e.info.segment = hello.segment;
  e.info.kv_layout = hello.kv_layout;
  e.info.identity = hello.identity;
  e.load.total_kv_pages = hello.kv_pages_total;
  e.load.free_kv_pages = hello.kv_pages_total;
  // Not placed until its first HEARTBEAT says healthy: by then it has our PEERS and can reach its peers.
  e.load.healthy = false;
  e.last_seen = st.now();
  st.entries[env.sender] = std::move(e);
  // A new incarnation: what went to the old one says nothing. Its list goes with the next flush.
  st.resend.forget(env.sender);
  st.resend.sent(env.sender, st.version + 1, st.now());
  st.bridge->send_to_endpoint(hello.control_endpoint, ack(st, true));
  publish(st, env.sender, std::nullopt);
}

void remove(RegistryState& st, std::map<std::string, RegistryEntry>::iterator it) {
  const std::string id = it->first;
  st.entries.erase(it);
  st.resend.forget(id);
  publish(st, std::nullopt, id);
}

const char* why_name(ListResend::Why why) {
  switch (why) {
    case ListResend::Why::asked:
      return "asked";
    case ListResend::Why::list_late:
      return "late";
    case ListResend::Why::stood_still:
      return "stood_still";
    case ListResend::Why::none:
      break;
  }
  return "none";
}

void on_heartbeat(RegistryState& st, const Envelope& env, const protocol::Heartbeat& hb) {
  auto it = st.entries.find(env.sender);
  if (it == st.entries.end() || it->second.info.incarnation != env.incarnation) {
    // Unknown (expired, or a registry restart): tell it to register again, on the socket it came from.
    st.bridge->reply(env.sender, protocol::ErrorReply{ErrorCode::unknown_peer, "not registered; send HELLO",
                                                      uint16_t(MessageType::heartbeat), 0});
    return;
  }
  auto& e = it->second;
  const bool health_changed = e.load.healthy != hb.load.healthy;
  if (health_changed)
    spdlog::info("registry: '{}' is now {}", env.sender, hb.load.healthy ? "healthy" : "unhealthy");
  if (hb.load.draining && !e.load.draining)
    spdlog::info("registry: '{}' is draining: no new placements", env.sender);
  e.load = hb.load;
  e.last_seen = st.now();
  if (st.config.full_lists) {
    if (hb.resync) st.bridge->send_to_endpoint(e.info.control_endpoint, full_list(st));
  } else if (const auto due = st.resend.due(env.sender, hb.peers_version, hb.resync, st.version, st.now());
             due.send()) {
    // The whole list, at the current version, on top of which the next delta applies.
    const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(due.waited).count();
    if (due.why == ListResend::Why::asked)
      spdlog::info("registry: '{}' reports a gap in PEERS versions; sending the full list", env.sender);
    else if (due.why == ListResend::Why::list_late)
      spdlog::warn(
          "registry: the full list sent to '{}' {} ms ago has not arrived (lost, or read late); sending it "
          "again",
          env.sender, waited);
    else
      spdlog::warn(
          "registry: '{}' has held PEERS version {} (ours: {}) for {} ms: a delta was lost or it reads "
          "late; sending the full list",
          env.sender, hb.peers_version, st.version, waited);
    st.bridge->send_to_endpoint(e.info.control_endpoint, full_list(st));
    st.resend.sent(env.sender, st.version, st.now());
    if (st.config.metrics) st.config.metrics->lists_sent(why_name(due.why));
  }
  if (!st.config.full_lists)
    st.view->update_load(env.sender, e.load, e.last_seen);  // health is read by the router only
  else if (health_changed)
    publish(st, std::nullopt, std::nullopt);
  else
    st.view->set(st.entries);
}

caf::behavior registry(caf::stateful_actor<RegistryState>* self, BridgePtr bridge, RegistryConfig config,
                       std::shared_ptr<RegistryView> view) {
  harden(self, "registry");
  auto& st = self->state;
  st.self = self;
  st.last_tick = st.now();
  st.bridge = std::move(bridge);
  st.config = config;
  st.window = BurstWindow(st.config.publish_window, st.config.publish_window_max);
  st.resend = ListResend(st.config.list_resend_wait);
  st.view = std::move(view);
  st.gate = CompatGate(st.bridge->instance_id(), st.config.identity, st.config.metrics);
  self->delayed_send(self, st.config.heartbeat_interval, tick_atom::value);
  return {
      [=](peers_atom) { flush(self->state); },
      [=](tick_atom) {
        auto& s = self->state;
        const auto limit = s.config.heartbeat_interval * s.config.misses;
        const auto now = s.now();
        // This process itself stalled (starved, stopped): the silence was ours, not the members'. Expiring
        // them all would make the whole cluster fail its rooms and rejoin; give everyone a fresh limit.
        if (now - s.last_tick > limit / 2) {
          spdlog::warn("registry: no tick for {} ms (this process stalled); members get a fresh limit",
                       std::chrono::duration_cast<std::chrono::milliseconds>(now - s.last_tick).count());
          for (auto& [_, e] : s.entries) e.last_seen = std::max(e.last_seen, now);
          if (s.view) s.view->seen_all_by(now);  // what /v1/instances shows as last_seen_ms
        }
        s.last_tick = now;
        std::vector<std::string> expired;
        for (const auto& [id, e] : s.entries)
          if (now - e.last_seen > limit) expired.push_back(id);
        for (const auto& id : expired) {
          spdlog::warn("registry: '{}' missed {} heartbeats; removed", id, s.config.misses);
          remove(s, s.entries.find(id));
        }
        self->delayed_send(self, s.config.heartbeat_interval, tick_atom::value);
      },
      [=](PeerEvent& ev) {
        // Our connection to a member broke (its process died or closed it; no ZMTP heartbeats run on the
        // registry's links, so a frozen member is left to `misses`): drop it now instead of after `misses`
        // silent intervals. A member that is in fact alive gets unknown_peer on its next HEARTBEAT and
        // registers again.
        if (ev.new_incarnation != 0) return;  // a restart shows up as its HELLO
        auto& s = self->state;
        for (auto it = s.entries.begin(); it != s.entries.end(); ++it) {
          if (it->second.info.control_endpoint != ev.endpoint || it->first == s.bridge->instance_id())
            continue;
          spdlog::warn("registry: '{}' (incarnation {}) lost: {}; removed", it->first,
                       it->second.info.incarnation, ev.reason);
          remove(s, it);
          return;
        }
      },
      [=](Envelope& env) {
        auto& s = self->state;
        if (auto* hello = std::get_if<protocol::Hello>(&env.body)) {
          on_hello(s, env, *hello);
        } else if (auto* hb = std::get_if<protocol::Heartbeat>(&env.body)) {
          on_heartbeat(s, env, *hb);
        } else if (std::holds_alternative<protocol::Goodbye>(env.body)) {
          auto it = s.entries.find(env.sender);
          if (it != s.entries.end() && it->second.info.incarnation == env.incarnation) {
            spdlog::info("registry: '{}' said goodbye", env.sender);
            remove(s, it);
          }
        }
      },
  };
}

}  // namespace

caf::actor spawn_registry(caf::actor_system& system, BridgePtr bridge, RegistryConfig config,
                          std::shared_ptr<RegistryView> view) {
  auto a = system.spawn(registry, bridge, config, std::move(view));
  // Role handler tables cannot take membership messages (MessageTable refuses them at compile time).
  for (auto t : {MessageType::hello, MessageType::heartbeat, MessageType::goodbye})
    if (auto st = bridge->subscribe(t, a); !st) spdlog::critical("registry: {}", st.error().to_string());
  bridge->subscribe_liveness(a);
  return a;
}

}  // namespace epd::actors

#include "epd/actors/membership.hpp"

#include <spdlog/spdlog.h>

#include "epd/actors/role_support.hpp"

namespace epd::actors {
namespace {

using protocol::Envelope;
using protocol::MessageType;

struct MembershipState {
  BridgePtr bridge;
  MembershipConfig config;
  std::shared_ptr<LoadGauge> load;
  caf::actor role;
  bool acked = false;
  bool have_peers = false;  // a PEERS arrived since the last HELLO
  uint64_t seq = 0;
  static inline const char* name = "membership";
};

void send_hello(MembershipState& st) {
  protocol::Hello hello;
  hello.role = st.config.role;
  hello.control_endpoint = st.bridge->endpoint();
  hello.segment = st.config.segment;
  hello.kv_layout = st.config.kv_layout;
  hello.kv_pages_total = st.config.kv_pages_total;
  st.bridge->send_to_endpoint(st.config.registry_endpoint, std::move(hello));
}

void send_heartbeat(MembershipState& st) {
  protocol::Heartbeat hb;
  hb.seq = ++st.seq;
  hb.healthy = st.load->healthy.load() && st.have_peers;  // cannot serve before it knows its peers
  hb.free_kv_pages = st.load->free_kv_pages.load();
  hb.total_kv_pages = st.load->total_kv_pages.load();
  hb.free_slots = st.load->free_slots.load();
  hb.total_slots = st.load->total_slots.load();
  hb.active_rooms = st.load->active_rooms.load();
  hb.worker_restarts = st.load->worker_restarts.load();
  hb.transfer_retries = st.load->transfer_retries.load();
  hb.transfer_failures = st.load->transfer_failures.load();
  hb.sessions_recycled = st.load->sessions_recycled.load();
  if (st.load->staging.active.load()) hb.staging = st.load->staging.take_snapshot();
  st.bridge->send_to_endpoint(st.config.registry_endpoint, hb);
}

caf::behavior membership(caf::stateful_actor<MembershipState>* self, BridgePtr bridge,
                         MembershipConfig config, std::shared_ptr<LoadGauge> load, caf::actor role) {
  harden(self, "membership");
  auto& st = self->state;
  st.bridge = std::move(bridge);
  st.config = std::move(config);
  st.load = std::move(load);
  st.role = std::move(role);
  send_hello(st);
  self->delayed_send(self, st.config.heartbeat_interval, tick_atom::value);
  return {
      [=](tick_atom) {
        auto& s = self->state;
        // Until the registry acknowledged us, every tick is another HELLO (the registry may start later).
        if (s.acked)
          send_heartbeat(s);
        else
          send_hello(s);
        self->delayed_send(self, s.config.heartbeat_interval, tick_atom::value);
      },
      [=](PeerEvent& ev) {
        auto& s = self->state;
        if (ev.id.empty() || ev.id == s.bridge->instance_id()) {
          if (ev.endpoint == s.config.registry_endpoint)
            spdlog::warn("membership: {}; heartbeats will reconnect", ev.reason);
          return;
        }
        if (!s.bridge->peers().mark_dead(ev.id, ev.old_incarnation)) return;  // already known
        spdlog::warn("membership: peer '{}' (incarnation {}) is dead to us: {}", ev.id, ev.old_incarnation,
                     ev.reason);
        if (s.role)
          self->send(s.role,
                     PeerChanges{{{ev.id, ev.old_incarnation, ev.new_incarnation}}, ev.new_incarnation != 0});
      },
      [=](Envelope& env) {
        auto& s = self->state;
        if (auto* ack = std::get_if<protocol::HelloAck>(&env.body)) {
          if (!ack->accepted) {
            spdlog::error("membership: registry refused HELLO: {}", ack->reason);
            return;
          }
          if (!s.acked) spdlog::info("membership: registered with the registry ({})", env.sender);
          s.acked = true;
        } else if (auto* peers = std::get_if<protocol::Peers>(&env.body)) {
          s.have_peers = true;
          auto changes = s.bridge->peers().replace(peers->version, peers->peers);
          for (const auto& c : changes) {
            if (c.new_incarnation == 0)
              spdlog::info("membership: peer '{}' left", c.id);
            else if (c.old_incarnation == 0)
              spdlog::info("membership: peer '{}' joined", c.id);
            else
              spdlog::info("membership: peer '{}' restarted (incarnation {} -> {})", c.id, c.old_incarnation,
                           c.new_incarnation);
          }
          if (!changes.empty() && s.role) self->send(s.role, PeerChanges{std::move(changes)});
        } else if (auto* err = std::get_if<protocol::ErrorReply>(&env.body)) {
          if (err->code == protocol::ErrorCode::unknown_peer) {
            // The registry lost us (it restarted, or expired us): register again.
            spdlog::warn("membership: registry does not know us any more; saying HELLO again");
            s.acked = false;
            send_hello(s);
          } else {
            spdlog::warn("membership: ERROR from {}: {} {}", env.sender, protocol::error_name(err->code),
                         err->detail);
          }
        }
      },
  };
}

}  // namespace

caf::actor spawn_membership(caf::actor_system& system, BridgePtr bridge, MembershipConfig config,
                            std::shared_ptr<LoadGauge> load, caf::actor role) {
  auto a = system.spawn(membership, bridge, std::move(config), std::move(load), std::move(role));
  bridge->subscribe(MessageType::hello_ack, a);
  bridge->subscribe(MessageType::peers, a);
  bridge->subscribe_liveness(a);
  return a;
}

}  // namespace epd::actors

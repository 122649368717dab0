#include "epd/actors/bridge.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "inline_unit.hpp"

namespace epd::actors {

using protocol::ErrorCode;
using protocol::MessageType;

Bridge::Bridge(std::string id, uint64_t incarnation, protocol::CodecLimits limits)
    : id_(std::move(id)), incarnation_(incarnation), limits_(limits) {}

Bridge::~Bridge() {
  stop();
}

protocol::Result<std::shared_ptr<Bridge>> Bridge::start(std::string instance_id, uint64_t incarnation,
                                                        std::string bind_endpoint,
                                                        protocol::CodecLimits limits, LivenessConfig liveness,
                                                        std::optional<transport::CurveConfig> curve,
                                                        std::shared_ptr<transport::ChannelHub> hub) {
  std::shared_ptr<Bridge> bridge(new Bridge(instance_id, incarnation, limits));
  transport::ChannelConfig cc;
  cc.identity = instance_id;
  cc.bind_endpoint = std::move(bind_endpoint);
  cc.max_frame_bytes = int64_t(limits.max_frame_bytes);
  cc.heartbeat_ivl_ms = int(liveness.heartbeat_interval.count());
  cc.heartbeat_timeout_ms = int(liveness.heartbeat_interval.count() * liveness.misses);
  cc.hub = std::move(hub);
  Bridge* raw = bridge.get();  // the channel stops (joins its thread) before the bridge is destroyed
  bridge->liveness_config_ = std::move(liveness);
  cc.heartbeats_to = [raw](const std::string& endpoint) { return raw->transport_heartbeats_to(endpoint); };
  if (curve) {
    // A peer's key by the endpoint PEERS lists for it (it may differ in spelling from the config's, e.g. a
    // resolved wildcard), else by the caller's map (the registry, before any PEERS arrived).
    std::map<std::string, std::string> key_of_id;
    for (const auto& [key, id] : curve->allowed) key_of_id[id] = key;
    curve->server_key = [raw, key_of_id = std::move(key_of_id),
                         by_config = std::move(curve->server_key)](const std::string& endpoint) {
      if (auto p = raw->peers_.find_by_endpoint(endpoint))
        if (auto it = key_of_id.find(p->instance_id); it != key_of_id.end()) return it->second;
      return by_config ? by_config(endpoint) : std::string();
    };
    cc.curve = std::move(curve);
  }
  auto channel = transport::ControlChannel::start(
      cc,
      [raw](const std::string& from, bool via_router, std::vector<uint8_t> frame) {
        raw->on_frame(from, via_router, std::move(frame));
      },
      [raw](const std::string& endpoint) { raw->on_disconnect(endpoint); });
  if (!channel) return channel.error();
  bridge->channel_ = std::move(channel.value());
  bridge->started_.store(true, std::memory_order_release);  // frames may be handled (and answered) now
  return bridge;
}

bool Bridge::transport_heartbeats_to(const std::string& endpoint) const {
  const auto& cfg = liveness_config_;
  if (cfg.router || std::ranges::find(cfg.router_endpoints, endpoint) != cfg.router_endpoints.end())
    return false;
  auto peer = peers_.find_by_endpoint(endpoint);
  return !peer || peer->role != protocol::kRouterRole;
}

std::shared_ptr<Bridge> Bridge::start_offline(std::string instance_id, uint64_t incarnation,
                                              protocol::CodecLimits limits) {
  std::shared_ptr<Bridge> bridge(new Bridge(instance_id, incarnation, limits));
  bridge->outbox_ = std::make_unique<Outbox>();
  bridge->offline_endpoint_ = "offline://" + instance_id;
  bridge->started_.store(true);
  bridge->wired_.store(true);  // tests subscribe before they feed frames
  return bridge;
}

void Bridge::receive_frame(const std::string& from, bool via_router, std::vector<uint8_t> frame) {
  if (outbox_) on_frame(from, via_router, std::move(frame));
}

void Bridge::transmit(bool reply, const std::string& to, std::vector<uint8_t> frame) {
  bytes_sent_ += frame.size();
  if (outbox_)
    outbox_->push(SentFrame{reply, to, std::move(frame)});
  else if (reply)
    channel_->reply(to, std::move(frame));
  else
    channel_->send(to, std::move(frame));
}

protocol::Status Bridge::subscribe(MessageType type, caf::actor target) {
  std::lock_guard lock(mu_);
  auto [it, fresh] = routes_.try_emplace(type, target);
  if (!fresh && it->second != target)
    return protocol::make_error(ErrorCode::config_error, std::string(protocol::type_name(type)) +
                                                             " is already handled by another actor");
  return {};
}

void Bridge::wired() {
  std::vector<protocol::Envelope> unclaimed;
  {
    // Under the lock, so that a frame the channel thread routes meanwhile queues behind these.
    std::lock_guard lock(mu_);
    wired_.store(true);
    for (auto& env : std::exchange(early_, {})) {
      if (auto target = route_locked(env)) {
        ++delivered_;
        caf::anon_send(target, std::move(env));
      } else {
        unclaimed.push_back(std::move(env));
      }
    }
  }
  for (const auto& env : unclaimed) unhandled(env);
}

caf::actor Bridge::route_locked(const protocol::Envelope& env) const {
  caf::actor target;
  if (auto it = routes_.find(env.type()); it != routes_.end()) target = it->second;
  if (const auto* err = std::get_if<protocol::ErrorReply>(&env.body))
    if (auto e = error_routes_.find(err->in_reply_to); e != error_routes_.end()) target = e->second;
  return target;
}

void Bridge::subscribe_errors_about(MessageType about, caf::actor target) {
  std::lock_guard lock(mu_);
  error_routes_[uint16_t(about)] = std::move(target);
}

void Bridge::subscribe_liveness(caf::actor target) {
  std::lock_guard lock(mu_);
  liveness_.push_back(std::move(target));
}

void Bridge::unsubscribe_all() {
  std::lock_guard lock(mu_);
  routes_.clear();
  error_routes_.clear();
  liveness_.clear();
  early_.clear();
}

void Bridge::publish(PeerEvent event) {
  std::vector<caf::actor> targets;
  {
    std::lock_guard lock(mu_);
    targets = liveness_;
  }
  for (auto& t : targets) caf::anon_send(t, event);
}

void Bridge::on_disconnect(const std::string& endpoint) {
  PeerEvent ev;
  ev.endpoint = endpoint;
  ev.reason = "control connection to " + endpoint + " lost";
  if (auto p = peers_.find_by_endpoint(endpoint)) {
    ev.id = p->instance_id;
    ev.old_incarnation = p->incarnation;
  }
  publish(std::move(ev));
}

std::vector<uint8_t> Bridge::encode(protocol::Body body) const {
  return protocol::encode(protocol::Envelope{id_, incarnation_.load(), std::move(body)});
}

bool Bridge::send(const std::string& peer_id, protocol::Body body) {
  auto ep = peers_.endpoint_of(peer_id);
  if (!ep) {
    ++undeliverable_;
    spdlog::warn("bridge: cannot send {} to unknown peer '{}'", protocol::type_name(protocol::type_of(body)),
                 peer_id);
    return false;
  }
  send_to_endpoint(*ep, std::move(body));
  return true;
}

void Bridge::send_to_endpoint(const std::string& endpoint, protocol::Body body) {
  ++sent_;
  transmit(false, endpoint, encode(std::move(body)));
}

size_t Bridge::send_to_endpoints(const std::vector<std::string>& endpoints, protocol::Body body) {
  if (endpoints.empty()) return 0;
  const auto frame = encode(std::move(body));
  for (const auto& endpoint : endpoints) {
    ++sent_;
    transmit(false, endpoint, frame);
  }
  return frame.size();
}

void Bridge::reply(const std::string& routing_id, protocol::Body body) {
  ++sent_;
  transmit(true, routing_id, encode(std::move(body)));
}

void Bridge::answer(const protocol::Envelope& env, protocol::Body body) {
  if (peers_.endpoint_of(env.sender))
    send(env.sender, std::move(body));
  else
    reply(env.sender, std::move(body));
}

void Bridge::forget_peer(const std::string& endpoint) {
  if (channel_) channel_->forget(endpoint);
}

void Bridge::reject(const std::string& from, bool via_router, const protocol::Error& error, uint16_t type) {
  ++rejected_;
  spdlog::warn("bridge: rejected a frame from '{}': {}", from, error.to_string());
  // Reply only to peers that reached our ROUTER, and never to an ERROR (no ping-pong).
  if (!via_router || type == uint16_t(MessageType::error)) return;
  transmit(true, from, encode(protocol::ErrorReply{error.code, error.detail, type, 0}));
}

// No actor of this process handles the type: an ERROR reply is logged (never answered: no ping-pong); any
// other message is answered with ERROR unexpected_message, so its sender learns at once.
void Bridge::unhandled(const protocol::Envelope& env) {
  ++undeliverable_;
  if (!wired_.load()) {  // still starting, and kMaxEarlyFrames are kept already: its sender repeats it
    spdlog::info("bridge: {} from '{}' before '{}' finished starting, {} frames waiting; dropped",
                 protocol::type_name(env.type()), env.sender, id_, kMaxEarlyFrames);
    return;
  }
  if (const auto* err = std::get_if<protocol::ErrorReply>(&env.body)) {
    spdlog::warn("bridge: ERROR from '{}' about {}: {} {}", env.sender,
                 protocol::type_name(MessageType(err->in_reply_to)), protocol::error_name(err->code),
                 err->detail);
    return;
  }
  spdlog::warn("bridge: '{}' does not handle {} (from '{}')", id_, protocol::type_name(env.type()),
               env.sender);
  answer(env, protocol::ErrorReply{ErrorCode::unexpected_message,
                                   id_ + " does not handle " + std::string(protocol::type_name(env.type())),
                                   uint16_t(env.type()), 0});
}

void Bridge::on_frame(const std::string& from, bool via_router, std::vector<uint8_t> frame) {
  bytes_received_ += frame.size();
  // A frame can arrive while start() is still storing the channel it would be answered through.
  if (!started_.load(std::memory_order_acquire)) {
    ++undeliverable_;
    return;
  }
  auto env = protocol::decode(frame, limits_);
  if (!env) {
    auto header = protocol::decode_header(frame, limits_);
    reject(from, via_router, env.error(), header ? uint16_t(header->type) : 0);
    return;
  }
  // A connection's routing id is its sender's instance id: a frame claiming another sender is refused.
  if (via_router && env->sender != from) {
    // Under one of libzmq's own ids (a zero byte and four more): a frame still queued on a connection
    // that its peer's new one took over (ROUTER_HANDOVER renames the old one until it closes). Stale, and
    // nobody is left there to answer: dropped and counted, without a warning per frame (a fleet under
    // load reconnects by the thousand).
    if (from.size() == 5 && from[0] == '\0') {
      ++rejected_;
      spdlog::debug("bridge: dropped a {} from '{}' queued on its old connection",
                    protocol::type_name(env->type()), env->sender);
      return;
    }
    reject(from, via_router,
           protocol::make_error(ErrorCode::invalid_request, "envelope sender '" + env->sender +
                                                                "' does not match routing id '" + from + "'"),
           uint16_t(env->type()));
    return;
  }
  // A newer incarnation than the one listed: the peer restarted, whether or not the registry said so yet.
  if (auto old = peers_.observe(env->sender, env->incarnation)) {
    auto p = peers_.find(env->sender);
    publish(PeerEvent{env->sender, p ? p->control_endpoint : "", *old, env->incarnation,
                      "a frame came from incarnation " + std::to_string(env->incarnation)});
  }
  caf::actor target;
  {
    std::lock_guard lock(mu_);
    target = route_locked(*env);
    if (!target && !wired_.load() && early_.size() < kMaxEarlyFrames) {
      early_.push_back(std::move(env.value()));
      return;
    }
  }
  if (!target) return unhandled(*env);
  ++delivered_;
  if (!channel_) return caf::anon_send(target, std::move(env.value()));  // offline: the test's scheduler
  if (!inline_unit_) inline_unit_ = std::make_unique<InlineUnit>(&target->home_system());
  if (&inline_unit_->system() != &target->home_system())
    return caf::anon_send(target, std::move(env.value()));
  inline_unit_->deliver(target, caf::make_message(std::move(env.value())));
}

BridgeStats Bridge::stats() const {
  return {delivered_.load(),
          rejected_.load(),
          undeliverable_.load(),
          sent_.load(),
          channel_ ? channel_->stats().refused_peers : 0,
          bytes_sent_.load(),
          bytes_received_.load()};
}

void Bridge::stop() {
  if (channel_) channel_->stop();
  unsubscribe_all();
}

}  // namespace epd::actors

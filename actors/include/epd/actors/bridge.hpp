#pragma once
// The ZeroMQ bridge of one process. Inbound: the control channel's I/O thread decodes each frame with the
// protocol codec (limits on) and delivers the typed Envelope to the actor subscribed to its type; bad frames
// are logged with their sender and answered with ERROR when the sender can be addressed. Outbound: any actor
// (or thread) calls send(), which encodes the frame and hands it to its socket under the channel's lock — it
// never blocks on the network.
// The bridge is a thread-owned object, not an actor: a bridge actor would add a mailbox hop per message
// without adding isolation. For the same reason a frame for an idle actor is run by the channel thread
// itself (one message, then the actor is the scheduler's again); offline bridges always use the mailbox.
#include <atomic>
#include <caf/all.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "epd/actors/caf_types.hpp"
#include "epd/actors/membership/peer_directory.hpp"
#include "epd/transport/control_channel.hpp"

namespace epd::actors {

class InlineUnit;

// Direct liveness news about a peer, from the control connections themselves: the connection to it broke
// (process died, socket closed, or ZMTP heartbeats went unanswered) or a frame came from a newer
// incarnation. Delivered to every liveness subscriber (membership, registry).
struct PeerEvent {
  std::string id;  // "" when the endpoint belongs to no listed peer
  std::string endpoint;
  uint64_t old_incarnation = 0;  // the incarnation listed when it happened
  uint64_t new_incarnation = 0;  // 0: connection lost
  std::string reason;
};

// ZMTP heartbeats on outgoing control connections: a PING per interval, a peer silent for interval x misses
// is disconnected (and reported). interval 0 = off.
// Only between instances that share rooms, never on a link with a router at either end: every instance
// sends its routers HEARTBEATs, and the registry (or a router's etcd view) drops a silent one after the same
// interval x misses, so ZMTP would tell nothing new there. It would cost: libzmq walks all of its I/O
// thread's timers to cancel one, once per PING round trip at each end, so a router with N heartbeating links
// spent O(N) per heartbeat, O(N^2) per interval, and at 2,000 instances its starved PINGs timed out and
// dropped live members (docs/architecture.md, "Capacity").
struct LivenessConfig {
  std::chrono::milliseconds heartbeat_interval{0};
  uint32_t misses = 3;
  bool router = false;                          // this process is a router (the registry's, or one of etcd's)
  std::vector<std::string> router_endpoints{};  // routers known before any PEERS: the registry's endpoint
};

struct BridgeStats {
  uint64_t delivered = 0;
  uint64_t rejected = 0;       // frames that failed to decode or were spoofed
  uint64_t undeliverable = 0;  // decoded, but no actor subscribed / peer unknown
  uint64_t sent = 0;
  uint64_t refused_peers = 0;   // CURVE: connections / frames refused before decoding (ChannelStats)
  uint64_t bytes_sent = 0;      // encoded frames handed to the channel (epd-bench membership's traffic)
  uint64_t bytes_received = 0;  // frames that arrived, before decoding
};

// What an offline bridge sent, in order: each frame as encoded for the wire, with its destination.
struct SentFrame {
  bool reply = false;  // true: answered through our ROUTER to routing id `to`; false: sent to endpoint `to`
  std::string to;
  std::vector<uint8_t> frame;
};

// The outbound side of an offline bridge (see Bridge::start_offline). Thread-safe: roles' detached actors
// send through the bridge too.
class Outbox {
 public:
  void push(SentFrame f) {
    std::lock_guard lock(mu_);
    frames_.push_back(std::move(f));
  }
  // Everything sent since the last take.
  std::vector<SentFrame> take() {
    std::lock_guard lock(mu_);
    return std::exchange(frames_, {});
  }

 private:
  std::mutex mu_;
  std::vector<SentFrame> frames_;
};

class Bridge {
 public:
  static protocol::Result<std::shared_ptr<Bridge>> start(std::string instance_id, uint64_t incarnation,
                                                         std::string bind_endpoint,
                                                         protocol::CodecLimits limits = {},
                                                         LivenessConfig liveness = {},
                                                         std::optional<transport::CurveConfig> curve = {},
                                                         std::shared_ptr<transport::ChannelHub> hub = {});
  // A bridge without sockets or I/O thread, for deterministic in-process tests of the actors (CAF's test
  // coordinator runs them on the test's thread; a ZeroMQ thread would make the order of events random).
  // Outbound frames are encoded as usual and collected in `outbox()`; inbound frames are handed in by
  // `receive_frame`, which routes them exactly as the I/O thread would.
  static std::shared_ptr<Bridge> start_offline(std::string instance_id, uint64_t incarnation,
                                               protocol::CodecLimits limits = {});
  ~Bridge();

  // Messages of `type` go to `target`; an error when another actor already takes them. A type nobody
  // takes is answered with ERROR unexpected_message (an ERROR reply nobody takes is logged).
  protocol::Status subscribe(protocol::MessageType type, caf::actor target);
  // Every actor of the process has subscribed: from now on a type nobody takes is answered with ERROR
  // unexpected_message. Before, such a frame is kept (up to kMaxEarlyFrames, then dropped: its sender
  // repeats it) and routed here: an answer can beat the subscription of the actor that asked (a router's
  // own registry answers its HELLO at once), and one lost answer can cost a member its list for long.
  void wired();
  static constexpr size_t kMaxEarlyFrames = 4096;
  // ERROR replies that answer a message of type `about` go to `target` (e.g. membership hears the
  // registry's unknown_peer answer to its HEARTBEAT, not the role).
  void subscribe_errors_about(protocol::MessageType about, caf::actor target);
  // `target` receives every PeerEvent.
  void subscribe_liveness(caf::actor target);
  void unsubscribe_all();

  // Sends to a registered peer by instance id; false (and a log line) when its endpoint is unknown.
  bool send(const std::string& peer_id, protocol::Body body);
  // Sends to an endpoint directly (e.g. the registry, before any PEERS arrived).
  void send_to_endpoint(const std::string& endpoint, protocol::Body body);
  // The same message to many endpoints, encoded once (the registry's PEERS to every member); the frame's
  // size in bytes (0 when there is no endpoint).
  size_t send_to_endpoints(const std::vector<std::string>& endpoints, protocol::Body body);
  // Answers a peer that reached our ROUTER (routing id = its instance id), even if it is not registered.
  void reply(const std::string& routing_id, protocol::Body body);
  // Answers the sender of `env`: through its registered endpoint, or straight back through our ROUTER when
  // it is not a registered peer (an intruder or a peer we have not heard of yet still gets its ERROR).
  void answer(const protocol::Envelope& env, protocol::Body body);
  // Drops the connection to a peer (after it died), so queued frames to a dead incarnation are discarded.
  void forget_peer(const std::string& endpoint);

  // Whether our connection to `endpoint` runs ZMTP heartbeats (LivenessConfig): not from a router, not to
  // one (listed with role "router", or in router_endpoints).
  bool transport_heartbeats_to(const std::string& endpoint) const;

  PeerDirectory& peers() { return peers_; }
  const std::string& instance_id() const { return id_; }
  uint64_t incarnation() const { return incarnation_.load(); }
  // Frames sent from now on carry `incarnation` (an instance that rejoins after the registry expired it).
  void set_incarnation(uint64_t incarnation) { incarnation_.store(incarnation); }
  const std::string& endpoint() const { return channel_ ? channel_->endpoint() : offline_endpoint_; }
  BridgeStats stats() const;
  void stop();

  // Offline bridges only (null / ignored otherwise).
  Outbox* outbox() const { return outbox_.get(); }
  void receive_frame(const std::string& from, bool via_router, std::vector<uint8_t> frame);

 private:
  Bridge(std::string id, uint64_t incarnation, protocol::CodecLimits limits);
  void on_frame(const std::string& from, bool via_router, std::vector<uint8_t> frame);
  void on_disconnect(const std::string& endpoint);
  void publish(PeerEvent event);
  void unhandled(const protocol::Envelope& env);
  caf::actor route_locked(const protocol::Envelope& env) const;  // the subscriber of env; mu_ held
  void reject(const std::string& from, bool via_router, const protocol::Error& error, uint16_t type);
  std::vector<uint8_t> encode(protocol::Body body) const;
  void transmit(bool reply, const std::string& to, std::vector<uint8_t> frame);

  const std::string id_;
  std::atomic<uint64_t> incarnation_;
  const protocol::CodecLimits limits_;
  std::unique_ptr<transport::ControlChannel> channel_;
  // The channel thread's execution unit: a frame for an idle actor runs there (inline_unit.hpp). Made on
  // the first frame, for the first target's actor system; touched by the channel thread only.
  std::unique_ptr<InlineUnit> inline_unit_;
  std::unique_ptr<Outbox> outbox_;  // set instead of channel_ by start_offline
  std::string offline_endpoint_;
  LivenessConfig liveness_config_;
  PeerDirectory peers_;
  mutable std::mutex mu_;
  std::map<protocol::MessageType, caf::actor> routes_;
  std::map<uint16_t, caf::actor> error_routes_;  // ERROR replies by the type they answer
  std::vector<caf::actor> liveness_;
  std::vector<protocol::Envelope> early_;  // frames nobody took before wired(), under mu_
  std::atomic<bool> started_{false}, wired_{false};
  std::atomic<uint64_t> delivered_{0}, rejected_{0}, undeliverable_{0}, sent_{0};
  std::atomic<uint64_t> bytes_sent_{0}, bytes_received_{0};
};

using BridgePtr = std::shared_ptr<Bridge>;

}  // namespace epd::actors

CAF_ALLOW_UNSAFE_MESSAGE_TYPE(epd::actors::PeerEvent)

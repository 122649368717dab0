#pragma once
// The control plane's sockets: one ZeroMQ ROUTER bound at this instance's control endpoint (receives from
// every peer) and one outbound ROUTER with a connection per peer endpoint (our routing id on each = my
// instance id) for sending; a peer costs its connection only (docs/transport.md). A caller's send
// hands its frame to the socket itself, under the channel's lock (one hop fewer than a queue to the I/O
// thread: docs/transport.md, "Control channel latency"); it never blocks on the network (a full peer queue
// drops the frame). The channel's I/O thread reads every socket and calls the handlers. Frames are opaque
// bytes here: the codec lives in protocol/.
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "epd/transport/types.hpp"

namespace epd::transport {

class ChannelHub;

// CURVE on every socket of the channel (docs/architecture.md, "Control plane authentication"): the ROUTER
// is a CURVE server that admits, through a ZAP handler on the channel's I/O thread, only clients whose public
// key is in `allowed`, and only under the routing id that key belongs to; each outbound connection is a CURVE
// client that must know its peer's public key. Keys are Z85 (curve_keys.hpp).
struct CurveConfig {
  std::string public_key, secret_key;          // mine
  std::map<std::string, std::string> allowed;  // public key -> the instance id it belongs to
  // The public key of whoever listens at `endpoint` ("" = unknown: frames to it are dropped, logged once).
  // Called under the channel's lock when the connection to it is made.
  std::function<std::string(const std::string& endpoint)> server_key;
};

struct ChannelConfig {
  std::string identity;                  // my instance id, my routing id at every peer
  std::string bind_endpoint;             // e.g. tcp://127.0.0.1:17001 or tcp://127.0.0.1:* (any port)
  int linger_ms = 200;                   // bounded, so shutdown never hangs on an absent peer
  int send_hwm = 10000;                  // frames queued per peer before sends are dropped (logged)
  int64_t max_frame_bytes = 64ll << 20;  // larger inbound frames make ZeroMQ drop the connection
  // ZMTP heartbeats on the outbound connections (those `heartbeats_to` allows): a PING each interval; a peer
  // that answers nothing within the timeout is disconnected (0 = off). A disconnect (peer closed, process
  // died, or heartbeat timeout) is reported.
  int heartbeat_ivl_ms = 0;
  int heartbeat_timeout_ms = 0;
  // Whether the connection to `endpoint` runs those heartbeats (unset: every one does). Called under the
  // channel's lock when the connection is made. A link whose liveness the application tells by its own
  // messages is better off without: libzmq cancels a timer by walking every timer of its I/O thread, and
  // each PING round trip cancels one on both ends, so a process with N heartbeating links spends O(N) per
  // PING (docs/architecture.md, "Capacity").
  std::function<bool(const std::string& endpoint)> heartbeats_to{};
  std::optional<CurveConfig> curve;  // none: plain ZMTP (the config allows that on loopback only)
  // Set: the channel uses the hub's ZeroMQ context and I/O thread (channel_hub.hpp), not its own. Plain
  // channels only.
  std::shared_ptr<ChannelHub> hub{};
};

struct ChannelStats {
  uint64_t received = 0;
  uint64_t sent = 0;
  uint64_t dropped_send = 0;  // peer queue full or unknown routing id
  uint64_t dropped_recv = 0;  // frames with an unexpected number of parts
  // CURVE: connections refused before any frame of theirs was read: a key not in the allowlist (ZAP), a
  // routing id that is not the key's, or a handshake that failed (no CURVE, garbage greeting).
  uint64_t refused_peers = 0;
  // Frames the I/O thread found only on its idle tick (200 ms), not announced by their socket: always 0
  // unless a wake-up was lost (a defect the tick bounds).
  uint64_t late_reads = 0;
};

class ControlChannel {
 public:
  // `from`: the sender's routing id when `via_router`, else the endpoint of the connection the reply came
  // back on.
  using Handler = std::function<void(const std::string& from, bool via_router, std::vector<uint8_t> frame)>;
  // An established connection to `endpoint` broke. It is already dropped (frames
  // queued to the dead peer are discarded, so a restarted peer on the same endpoint never gets them).
  using DisconnectHandler = std::function<void(const std::string& endpoint)>;

  // Binds and starts the I/O thread. Errors: io_error naming the endpoint (e.g. address already in use).
  static Result<std::unique_ptr<ControlChannel>> start(ChannelConfig config, Handler handler,
                                                       DisconnectHandler on_disconnect = {});
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // The endpoint actually bound (a wildcard port resolved).
  const std::string& endpoint() const;
  // Queues `frame` for the peer listening at `endpoint` (a connection is made on first use). Thread-safe;
  // frames one thread sends to one endpoint arrive in order. Dropped (and counted) after stop().
  void send(const std::string& endpoint, std::vector<uint8_t> frame);
  // Queues `frame` back to a peer that reached my ROUTER with routing id `routing_id`.
  void reply(const std::string& routing_id, std::vector<uint8_t> frame);
  // Closes the connection to `endpoint` (e.g. after the peer died); queued frames to it are dropped, and the
  // next send() to it opens a new connection.
  void forget(const std::string& endpoint);
  ChannelStats stats() const;
  // Stops the I/O thread and closes every socket (bounded by linger). Idempotent.
  void stop();

 private:
  struct Impl;
  explicit ControlChannel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace epd::transport

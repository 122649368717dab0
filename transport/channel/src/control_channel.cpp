#include "epd/transport/control_channel.hpp"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <zmq.hpp>

namespace epd::transport {
namespace {

enum class CmdKind { send, reply, forget };
struct Cmd {
  CmdKind kind;
  std::string target;
  std::vector<uint8_t> frame;
};

// A DEALER plus the PAIR socket its monitor reports disconnects on.
struct Dealer {
  zmq::socket_t socket;
  zmq::socket_t monitor;
};

// The address libzmq's ZAP client asks at (RFC 27); one handler per context, so per channel.
constexpr const char* zap_endpoint = "inproc://zeromq.zap.01";
constexpr size_t max_logged_sources = 1024;  // refusals are logged once per source, for this many sources

std::string z85_of(const zmq::message_t& raw) {
  if (raw.size() != 32) return "?";
  char out[41] = {};
  zmq_z85_encode(out, static_cast<const uint8_t*>(raw.data()), 32);
  return out;
}

}  // namespace

struct ControlChannel::Impl {
  ChannelConfig config;
  Handler handler;
  DisconnectHandler on_disconnect;
  // One I/O thread. Sockets: the registry's process holds a DEALER and its monitor per member, which passes
  // ZeroMQ's default of 1,023 per context at about 500 members (epd-bench membership runs 1,000).
  zmq::context_t ctx{1, 8192};
  zmq::socket_t router{ctx, zmq::socket_type::router};
  zmq::socket_t zap;                      // REP at zap_endpoint (CURVE only)
  zmq::socket_t router_monitor;           // handshake failures on the ROUTER (CURVE only)
  std::set<std::string> logged_sources;   // refusals already logged (bounded)
  std::map<std::string, Dealer> dealers;  // endpoint -> socket; I/O thread only
  uint64_t monitors = 0;
  std::string bound;
  int wake_fd = -1;
  std::mutex mu;
  std::deque<Cmd> queue;
  std::thread io;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> received{0}, sent{0}, dropped_send{0}, dropped_recv{0}, refused_peers{0};

  ~Impl() {
    if (wake_fd >= 0) ::close(wake_fd);
  }

  void push(Cmd cmd) {
    {
      std::lock_guard lock(mu);
      queue.push_back(std::move(cmd));
    }
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  // Once per key (bounded): a refusal is news, a thousand identical ones are noise.
  bool first_time(const std::string& source) {
    if (logged_sources.size() >= max_logged_sources) return false;
    return logged_sources.insert(source).second;
  }

  // Null when the peer's public key is unknown (CURVE on): nothing can be sent to it.
  zmq::socket_t* dealer_for(const std::string& endpoint) {
    auto it = dealers.find(endpoint);
    if (it != dealers.end()) return &it->second.socket;
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    if (config.curve) {
      const std::string server = config.curve->server_key ? config.curve->server_key(endpoint) : "";
      if (server.empty()) {
        if (first_time("no-key " + endpoint))
          spdlog::warn("control: no public key is known for {}: frames to it are dropped", endpoint);
        return nullptr;
      }
      s.set(zmq::sockopt::curve_serverkey, server);
      s.set(zmq::sockopt::curve_publickey, config.curve->public_key);
      s.set(zmq::sockopt::curve_secretkey, config.curve->secret_key);
    }
    s.set(zmq::sockopt::routing_id, config.identity);
    s.set(zmq::sockopt::linger, config.linger_ms);
    s.set(zmq::sockopt::sndhwm, config.send_hwm);
    s.set(zmq::sockopt::maxmsgsize, config.max_frame_bytes);
    if (config.heartbeat_ivl_ms > 0) {
      s.set(zmq::sockopt::heartbeat_ivl, config.heartbeat_ivl_ms);
      s.set(zmq::sockopt::heartbeat_timeout, config.heartbeat_timeout_ms);
      s.set(zmq::sockopt::heartbeat_ttl, config.heartbeat_timeout_ms);
    }
    // The monitor must be attached before connect so no disconnect can be missed.
    const std::string addr = "inproc://epd-monitor-" + std::to_string(++monitors);
    // A failed handshake (the peer refused our key, or it is not who we think) is reported like a disconnect:
    // the peer is unreachable to us, and that must show rather than frames queueing forever.
    const int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(s.handle(), addr.c_str(), events) != 0) throw zmq::error_t();
    zmq::socket_t mon(ctx, zmq::socket_type::pair);
    mon.set(zmq::sockopt::linger, 0);
    mon.connect(addr);
    s.connect(endpoint);
    return &dealers.emplace(endpoint, Dealer{std::move(s), std::move(mon)}).first->second.socket;
  }

  void drop_dealer(const std::string& endpoint) {
    auto it = dealers.find(endpoint);
    if (it == dealers.end()) return;
    zmq_socket_monitor(it->second.socket.handle(), nullptr, 0);
    // Queued frames are for a peer we consider gone: discard them rather than deliver them to whatever
    // restarts on that endpoint.
    it->second.socket.set(zmq::sockopt::linger, 0);
    dealers.erase(it);
  }

  void on_monitor_readable(const std::string& endpoint, zmq::socket_t& mon) {
    auto parts = read_parts(mon);
    if (parts.size() < 1 || parts[0].size() < sizeof(uint16_t)) return;
    uint16_t event = 0;
    std::memcpy(&event, parts[0].data(), sizeof event);
    if (event != ZMQ_EVENT_DISCONNECTED) {
      if (first_time("handshake " + endpoint))
        spdlog::warn(
            "control: CURVE handshake with {} failed (event {:#x}): it refused our key or holds "
            "another key than the cluster lists for it",
            endpoint, event);
    }
    spdlog::debug("control: connection to {} lost", endpoint);
    drop_dealer(endpoint);
    if (on_disconnect) {
      try {
        on_disconnect(endpoint);
      } catch (const std::exception& e) {
        spdlog::error("control: disconnect handler failed for {}: {}", endpoint, e.what());
      }
    }
  }

  void run_command(Cmd& cmd) {
    try {
      switch (cmd.kind) {
        case CmdKind::send: {
          auto* s = dealer_for(cmd.target);
          if (s && s->send(zmq::buffer(cmd.frame), zmq::send_flags::dontwait)) {
            ++sent;
          } else {
            ++dropped_send;
            if (s)
              spdlog::warn("control: queue to {} is full, dropped a {}-byte frame", cmd.target,
                           cmd.frame.size());
          }
          break;
        }
        case CmdKind::reply: {
          // ROUTER_MANDATORY: an unknown routing id throws EHOSTUNREACH instead of vanishing silently.
          if (router.send(zmq::buffer(cmd.target), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
              router.send(zmq::buffer(cmd.frame), zmq::send_flags::dontwait)) {
            ++sent;
          } else {
            ++dropped_send;
          }
          break;
        }
        case CmdKind::forget:
          drop_dealer(cmd.target);
          break;
      }
    } catch (const zmq::error_t& e) {
      ++dropped_send;
      spdlog::warn("control: cannot send to {}: {}", cmd.target, e.what());
    }
  }

  void drain_commands() {
    uint64_t counter;
    [[maybe_unused]] auto n = ::read(wake_fd, &counter, sizeof counter);
    std::deque<Cmd> batch;
    {
      std::lock_guard lock(mu);
      batch.swap(queue);
    }
    for (auto& cmd : batch) run_command(cmd);
  }

  // Reads one multipart message; returns its parts.
  static std::vector<zmq::message_t> read_parts(zmq::socket_t& s) {
    std::vector<zmq::message_t> parts;
    while (true) {
      zmq::message_t m;
      if (!s.recv(m, zmq::recv_flags::dontwait)) break;
      const bool more = m.more();
      parts.push_back(std::move(m));
      if (!more) break;
    }
    return parts;
  }

  void deliver(const std::string& from, bool via_router, zmq::message_t& m) {
    ++received;
    const auto* p = static_cast<const uint8_t*>(m.data());
    try {
      handler(from, via_router, std::vector<uint8_t>(p, p + m.size()));
    } catch (const std::exception& e) {
      spdlog::error("control: handler failed on a frame from {}: {}", from, e.what());
    }
  }

  void on_router_readable() {
    auto parts = read_parts(router);
    if (parts.size() != 2) {
      ++dropped_recv;
      spdlog::warn("control: dropped a {}-part message on the ROUTER (expected routing id + one frame)",
                   parts.size());
      return;
    }
    if (config.curve) {
      // ZAP said which instance the key belongs to (its User-Id); a frame under another routing id is an
      // insider claiming someone else's name. Refused before it is decoded.
      const char* owner = parts[1].gets("User-Id");
      if (!owner || parts[0].to_string() != owner) {
        ++refused_peers;
        if (first_time("spoof " + parts[0].to_string()))
          spdlog::warn("control: refused frames from routing id '{}': its key belongs to '{}'",
                       parts[0].to_string(), owner ? owner : "?");
        return;
      }
    }
    deliver(parts[0].to_string(), true, parts[1]);
  }

  // ZAP (RFC 27): version, request id, domain, address, identity, mechanism, credentials (the client's
  // 32-byte public key). Runs inside the handshake: a refused peer never gets a frame to us.
  void on_zap_readable() {
    auto req = read_parts(zap);
    if (req.size() < 6) return;  // libzmq's own client; a short request cannot happen
    std::string status = "400", text = "unknown key", user;
    const std::string address = req[3].to_string();
    std::string key = "?";
    if (req[5].to_string() == "CURVE" && req.size() == 7) {
      key = z85_of(req[6]);
      if (auto it = config.curve->allowed.find(key); it != config.curve->allowed.end()) {
        status = "200";
        text = "OK";
        user = it->second;
      }
    }
    if (status != "200") {
      ++refused_peers;
      if (first_time("zap " + address))
        spdlog::warn(
            "control: refused a peer at {} whose key {}... is not in the cluster's keys "
            "(logged once per address)",
            address, key.substr(0, 8));
    }
    const std::string version = "1.0";
    zap.send(zmq::buffer(version), zmq::send_flags::sndmore);
    zap.send(req[1], zmq::send_flags::sndmore);
    zap.send(zmq::buffer(status), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(text), zmq::send_flags::sndmore);
    zap.send(zmq::buffer(user), zmq::send_flags::sndmore);
    zap.send(zmq::str_buffer(""), zmq::send_flags::none);
  }

  // Handshakes that failed before ZAP: a client without CURVE, or garbage instead of a greeting.
  void on_router_monitor_readable() {
    auto parts = read_parts(router_monitor);
    if (parts.empty() || parts[0].size() < sizeof(uint16_t)) return;
    uint16_t event = 0;
    std::memcpy(&event, parts[0].data(), sizeof event);
    if (event == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH) return;  // ZAP refused it and counted it already
    ++refused_peers;
    if (first_time("handshake-router"))
      spdlog::warn(
          "control: a peer failed the CURVE handshake (no CURVE, or not ZeroMQ; event {:#x}); "
          "logged once, counted always",
          event);
  }

  void on_dealer_readable(const std::string& endpoint, zmq::socket_t& s) {
    auto parts = read_parts(s);
    if (parts.size() != 1) {
      ++dropped_recv;
      return;
    }
    deliver(endpoint, false, parts[0]);
  }

  void loop() {
    std::vector<zmq::pollitem_t> items;
    std::vector<std::pair<std::string, Dealer*>> polled;
    while (!stopping.load()) {
      items.clear();
      polled.clear();
      items.push_back({nullptr, wake_fd, ZMQ_POLLIN, 0});
      items.push_back({router.handle(), 0, ZMQ_POLLIN, 0});
      // CURVE: ZAP and the ROUTER's monitor. Only when they exist: a null socket would make zmq_poll watch
      // file descriptor 0 instead.
      const bool curve = bool(zap);
      if (curve) {
        items.push_back({zap.handle(), 0, ZMQ_POLLIN, 0});
        items.push_back({router_monitor.handle(), 0, ZMQ_POLLIN, 0});
      }
      const size_t first_dealer = items.size();
      for (auto& [ep, d] : dealers) {
        items.push_back({d.socket.handle(), 0, ZMQ_POLLIN, 0});
        items.push_back({d.monitor.handle(), 0, ZMQ_POLLIN, 0});
        polled.emplace_back(ep, &d);
      }
      try {
        zmq::poll(items.data(), items.size(), std::chrono::milliseconds(200));
      } catch (const zmq::error_t& e) {
        if (e.num() == ETERM) break;
        if (e.num() == EINTR) continue;
        spdlog::error("control: poll failed: {}", e.what());
        continue;
      }
      if (curve && (items[2].revents & ZMQ_POLLIN)) on_zap_readable();  // first: a handshake waits on it
      if (curve && (items[3].revents & ZMQ_POLLIN)) on_router_monitor_readable();
      if (items[1].revents & ZMQ_POLLIN) on_router_readable();
      std::vector<std::string> lost;
      for (size_t i = 0; i < polled.size(); ++i) {
        if (items[first_dealer + 2 * i].revents & ZMQ_POLLIN)
          on_dealer_readable(polled[i].first, polled[i].second->socket);
        if (items[first_dealer + 2 * i + 1].revents & ZMQ_POLLIN) lost.push_back(polled[i].first);
      }
      // After the loop: a disconnect erases the dealer `polled` points to.
      for (const auto& ep : lost)
        if (auto it = dealers.find(ep); it != dealers.end()) on_monitor_readable(ep, it->second.monitor);
      // Commands last: they may erase dealers referenced by `polled`.
      if (items[0].revents & ZMQ_POLLIN) drain_commands();
    }
    drain_commands();  // flush what callers queued before stop(), bounded by linger
    for (auto& [_, d] : dealers) zmq_socket_monitor(d.socket.handle(), nullptr, 0);
    dealers.clear();
    if (router_monitor) zmq_socket_monitor(router.handle(), nullptr, 0);
    router.close();
    router_monitor.close();
    zap.close();
  }
};

ControlChannel::ControlChannel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<ControlChannel>> ControlChannel::start(ChannelConfig config, Handler handler,
                                                              DisconnectHandler on_disconnect) {
  auto impl = std::make_unique<Impl>();
  impl->config = std::move(config);
  impl->handler = std::move(handler);
  impl->on_disconnect = std::move(on_disconnect);
  impl->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0) return make_error(ErrorCode::io_error, "eventfd failed");
  try {
    impl->router.set(zmq::sockopt::linger, impl->config.linger_ms);
    impl->router.set(zmq::sockopt::router_mandatory, 1);
    // A peer's new connection takes its routing id over from an old one we have not seen close yet (it
    // reconnected while we were stalled, or after it dropped a connection it thought dead): without this,
    // libzmq leaves the new connection anonymous and silently drops everything it sends.
    impl->router.set(zmq::sockopt::router_handover, 1);
    impl->router.set(zmq::sockopt::maxmsgsize, impl->config.max_frame_bytes);
    impl->router.set(zmq::sockopt::sndhwm, impl->config.send_hwm);
    if (impl->config.curve) {
      auto& c = *impl->config.curve;
      // The ZAP handler is bound before the ROUTER: libzmq admits every CURVE client when no handler
      // listens, so no connection may be accepted before it does.
      impl->zap = zmq::socket_t(impl->ctx, zmq::socket_type::rep);
      impl->zap.set(zmq::sockopt::linger, 0);
      impl->zap.bind(zap_endpoint);
      impl->router.set(zmq::sockopt::curve_server, 1);
      impl->router.set(zmq::sockopt::curve_secretkey, c.secret_key);
      impl->router.set(zmq::sockopt::zap_domain, "epd");
      const std::string mon = "inproc://epd-router-monitor";
      if (zmq_socket_monitor(impl->router.handle(), mon.c_str(),
                             ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) != 0)
        throw zmq::error_t();
      impl->router_monitor = zmq::socket_t(impl->ctx, zmq::socket_type::pair);
      impl->router_monitor.set(zmq::sockopt::linger, 0);
      impl->router_monitor.connect(mon);
    }
    impl->router.bind(impl->config.bind_endpoint);
    impl->bound = impl->router.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::io_error,
                      "cannot bind control endpoint " + impl->config.bind_endpoint + ": " + e.what());
  }
  Impl* raw = impl.get();
  impl->io = std::thread([raw] { raw->loop(); });
  return std::unique_ptr<ControlChannel>(new ControlChannel(std::move(impl)));
}

ControlChannel::~ControlChannel() {
  stop();
}

const std::string& ControlChannel::endpoint() const {
  return impl_->bound;
}

void ControlChannel::send(const std::string& endpoint, std::vector<uint8_t> frame) {
  impl_->push({CmdKind::send, endpoint, std::move(frame)});
}
void ControlChannel::reply(const std::string& routing_id, std::vector<uint8_t> frame) {
  impl_->push({CmdKind::reply, routing_id, std::move(frame)});
}
void ControlChannel::forget(const std::string& endpoint) {
  impl_->push({CmdKind::forget, endpoint, {}});
}

ChannelStats ControlChannel::stats() const {
  return {impl_->received.load(), impl_->sent.load(), impl_->dropped_send.load(), impl_->dropped_recv.load(),
          impl_->refused_peers.load()};
}

void ControlChannel::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(impl_->wake_fd, &one, sizeof one);
  if (impl_->io.joinable()) impl_->io.join();
  impl_->ctx.close();
}

}  // namespace epd::transport

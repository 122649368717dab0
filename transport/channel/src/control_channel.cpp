#include "epd/transport/control_channel.hpp"

#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>

#include "hub_member.hpp"

namespace epd::transport {
namespace {

// One peer endpoint we send to: a connection of the outbound ROUTER. Its routing id there is an alias of
// ours, unique per link: libzmq aborts on a routing id reused while the old connection's pipe is still
// closing, and a link to an endpoint may be dropped and made again at once.
struct Link {
  std::string alias;
  std::string address;  // the endpoint as libzmq resolved it: what the monitor's events name
};

// What one poll entry watches (its descriptor is the socket's ZMQ_FD: readable when the socket may have
// news; its ZMQ_EVENTS says which).
enum class Watch : uint8_t { wake, zap, router_monitor, router, out, out_monitor };

// A frame read under the lock, handed to the handler after it is released.
struct Inbound {
  std::string from;
  bool via_router;
  zmq::message_t frame;
};

// Frames read from one socket per wake-up, so one busy peer cannot hold the lock (and every sender) long.
constexpr int reads_per_wake = 64;

int fd_of(zmq::socket_t& s) {
  return s.get(zmq::sockopt::fd);
}

bool readable(zmq::socket_t& s) {
  return (s.get(zmq::sockopt::events) & ZMQ_POLLIN) != 0;
}

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

// Threading. Every socket is guarded by `mu`: ZeroMQ sockets are not thread-safe, but one may be used by
// several threads in turn when a full memory barrier separates them, which the mutex gives. A caller's
// send() takes the lock and hands the frame to the outbound ROUTER itself (ZeroMQ's I/O thread then writes
// it), so a frame crosses no thread of ours on the way out. The channel's I/O thread only reads: it polls the
// sockets' ZMQ_FDs without the lock, then takes it to read what arrived, and calls the handler after it is
// released (a handler may send). A socket's ZMQ_FD signals only "look at ZMQ_EVENTS", and any operation on
// the socket may consume that signal, so a caller whose send leaves a socket readable wakes the I/O thread.
struct ControlChannel::Impl final : detail::HubMember {
  ChannelConfig config;
  Handler handler;
  DisconnectHandler on_disconnect;
  // Sockets: a channel holds five at most, but the hub's context holds those of thousands of channels
  // (epd-bench membership), past ZeroMQ's default of 1,023 per context.
  // Made only without a hub: a context costs a descriptor (its mailbox) even with no socket in it.
  std::unique_ptr<zmq::context_t> own_ctx;
  std::shared_ptr<ChannelHub> hub;  // set: the hub's context and thread instead of ours
  uint64_t hub_key = 0;
  zmq::context_t* ctx = nullptr;
  zmq::socket_t router;
  zmq::socket_t zap;             // REP at zap_endpoint (CURVE only)
  zmq::socket_t router_monitor;  // handshake failures on the ROUTER (CURVE only)
  // Every peer we send to is a connection of this one ROUTER (routing id: a link's alias), not a DEALER of
  // its own: a socket and its monitor cost three descriptors, so the registry's process held five per
  // member and 20,000 (this container's hard limit) at 4,000 members; now it holds two.
  zmq::socket_t out;
  zmq::socket_t out_monitor;  // its connections made and lost, and failed handshakes
  std::string bound;
  int wake_fd = -1;
  int ep = -1;  // the channel thread's epoll set (standalone channels)
  std::thread io;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> received{0}, sent{0}, dropped_send{0}, dropped_recv{0}, refused_peers{0},
      late_reads{0};

  std::mutex mu;                      // guards every socket and everything below
  std::map<std::string, Link> links;  // endpoint -> its connection
  std::unordered_map<std::string, std::string> endpoint_of_alias;
  std::unordered_map<std::string, std::string> alias_of_address;  // the newest link to each address
  // The connection behind each descriptor the monitor reported connected (a link's alias). An alias no
  // longer listed is a dropped link's: its late events are ignored.
  std::unordered_map<int, std::string> alias_of_fd;
  uint64_t links_made = 0;
  std::set<std::string> logged_sources;  // refusals already logged (bounded)
  bool look_again = true;  // a caller may have consumed a socket's signal: read every socket once
  bool closed = false;     // stop() closed the sockets: sends are dropped

  ~Impl() {
    if (wake_fd >= 0) ::close(wake_fd);
    if (ep >= 0) ::close(ep);
  }

  void wake() {
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd, &one, sizeof one);
  }

  // Once per key (bounded): a refusal is news, a thousand identical ones are noise.
  bool first_time(const std::string& source) {
    if (logged_sources.size() >= max_logged_sources) return false;
    return logged_sources.insert(source).second;
  }

  // Under mu. Null when the peer's public key is unknown (CURVE on): nothing can be sent to it. The options
  // a connection needs of its own (the peer's key, heartbeats) are set just before its connect: libzmq copies
  // a socket's options into each connection as it is made.
  Link* link_for(const std::string& endpoint) {
    auto it = links.find(endpoint);
    if (it != links.end()) return &it->second;
    if (config.curve) {
      const std::string server = config.curve->server_key ? config.curve->server_key(endpoint) : "";
      if (server.empty()) {
        if (first_time("no-key " + endpoint))
          spdlog::warn("control: no public key is known for {}: frames to it are dropped", endpoint);
        return nullptr;
      }
      out.set(zmq::sockopt::curve_serverkey, server);
    }
    const bool beats =
        config.heartbeat_ivl_ms > 0 && (!config.heartbeats_to || config.heartbeats_to(endpoint));
    out.set(zmq::sockopt::heartbeat_ivl, beats ? config.heartbeat_ivl_ms : 0);
    Link link{endpoint + "#" + std::to_string(++links_made), {}};
    out.set(zmq::sockopt::connect_routing_id, link.alias);
    out.connect(endpoint);
    link.address = out.get(zmq::sockopt::last_endpoint);  // resolved, as the monitor will name it
    endpoint_of_alias[link.alias] = endpoint;
    alias_of_address[link.address] = link.alias;
    return &links.emplace(endpoint, std::move(link)).first->second;
  }

  // Under mu. Frames still queued to the peer are discarded, not delivered to whatever restarts on that
  // endpoint; a later send makes a new connection.
  void drop_link(const std::string& endpoint) {
    auto it = links.find(endpoint);
    if (it == links.end()) return;
    out.set(zmq::sockopt::linger, 0);  // libzmq's disconnect lingers by the socket's value at this moment
    // Fails only when libzmq already closed the connection itself (a failed handshake): nothing to undo.
    zmq_disconnect(out.handle(), endpoint.c_str());
    out.set(zmq::sockopt::linger, config.linger_ms);
    if (auto a = alias_of_address.find(it->second.address);
        a != alias_of_address.end() && a->second == it->second.alias)
      alias_of_address.erase(a);
    endpoint_of_alias.erase(it->second.alias);
    links.erase(it);
  }

  // Any thread: runs `use` on the sockets under the lock, unless stop() closed them (then the frame is
  // dropped and counted). `use` returns the socket it sent on (null: none). The I/O thread is woken when it
  // must look again: the socket was left readable (see the threading note).
  template <class Use>
  void with_sockets(Use&& use) {
    bool wake_io = false;
    {
      std::lock_guard lock(mu);
      if (closed) {
        ++dropped_send;
        return;
      }
      zmq::socket_t* used = use();
      if (used && readable(*used)) look_again = true;
      wake_io = look_again;
    }
    if (wake_io) wake();
  }

  void send(const std::string& endpoint, std::vector<uint8_t>& frame) {
    with_sockets([&]() -> zmq::socket_t* {
      try {
        Link* link = link_for(endpoint);
        if (!link) {
          ++dropped_send;
          return nullptr;
        }
        // ROUTER_MANDATORY: a connection libzmq closed already throws EHOSTUNREACH (below); a full queue is
        // a false return.
        if (out.send(zmq::buffer(link->alias), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
            out.send(zmq::buffer(frame), zmq::send_flags::dontwait)) {
          ++sent;
        } else {
          ++dropped_send;
          spdlog::warn("control: queue to {} is full, dropped a {}-byte frame", endpoint, frame.size());
        }
        return &out;
      } catch (const zmq::error_t& e) {
        ++dropped_send;
        spdlog::warn("control: cannot send to {}: {}", endpoint, e.what());
        return nullptr;
      }
    });
  }

  void reply(const std::string& routing_id, std::vector<uint8_t>& frame) {
    with_sockets([&] {
      try {
        // ROUTER_MANDATORY: an unknown routing id throws EHOSTUNREACH instead of vanishing silently.
        if (router.send(zmq::buffer(routing_id), zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
            router.send(zmq::buffer(frame), zmq::send_flags::dontwait))
          ++sent;
        else
          ++dropped_send;
      } catch (const zmq::error_t& e) {
        ++dropped_send;
        if (first_time("unreachable " + routing_id))
          spdlog::warn("control: cannot answer {}: {} (logged once per peer)", routing_id, e.what());
      }
      return &router;
    });
  }

  void forget(const std::string& endpoint) {
    {
      std::lock_guard lock(mu);
      if (closed) return;
      drop_link(endpoint);
    }
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

  void deliver(Inbound& in) {
    ++received;
    const auto* p = static_cast<const uint8_t*>(in.frame.data());
    try {
      handler(in.from, in.via_router, std::vector<uint8_t>(p, p + in.frame.size()));
    } catch (const std::exception& e) {
      spdlog::error("control: handler failed on a frame from {}: {}", in.from, e.what());
    }
  }

  // Under mu: one message from the ROUTER into `inbox`.
  void read_router(std::vector<Inbound>& inbox) {
    auto parts = read_parts(router);
    if (parts.empty()) return;
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
    inbox.push_back({parts[0].to_string(), true, std::move(parts[1])});
  }

  // Under mu. ZAP (RFC 27): version, request id, domain, address, identity, mechanism, credentials (the
  // client's 32-byte public key). Runs inside the handshake: a refused peer never gets a frame to us.
  void answer_zap() {
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

  // Under mu. Handshakes that failed before ZAP: a client without CURVE, or garbage instead of a greeting.
  void read_router_monitor() {
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

  // Under mu: one event of the outbound ROUTER's monitor. A connection made is noted by its descriptor; a
  // connection lost (peer closed, process died, heartbeat timeout, failed handshake) drops its link, and
  // `lost` gets the endpoint for the disconnect handler. Events of a link dropped already are ignored.
  void read_out_monitor(std::vector<std::string>& lost) {
    auto parts = read_parts(out_monitor);
    if (parts.size() != 2 || parts[0].size() < sizeof(uint16_t) + sizeof(uint32_t)) return;
    uint16_t event = 0;
    uint32_t value = 0;
    std::memcpy(&event, parts[0].data(), sizeof event);
    std::memcpy(&value, static_cast<const char*>(parts[0].data()) + sizeof event, sizeof value);
    const std::string address = parts[1].to_string();
    if (event == ZMQ_EVENT_CONNECTED) {
      // The newest link to the address: a dropped link's connection made before its drop took effect is
      // credited to it too, and is closed without an event.
      if (auto a = alias_of_address.find(address); a != alias_of_address.end())
        alias_of_fd[int(value)] = a->second;
      return;
    }
    if (event != ZMQ_EVENT_DISCONNECTED) {  // a failed handshake; its DISCONNECTED follows
      if (!first_time("handshake " + address)) return;
      if (!config.curve)  // no keys to blame: the connection broke or timed out mid-handshake
        spdlog::warn(
            "control: the handshake with {} did not complete (the connection closed or the peer did "
            "not answer in time)",
            address);
      else
        spdlog::warn(
            "control: CURVE handshake with {} failed (event {:#x}): it refused our key or holds "
            "another key than the cluster lists for it",
            address, event);
      return;
    }
    auto fd = alias_of_fd.find(int(value));
    if (fd == alias_of_fd.end()) return;
    const std::string alias = std::move(fd->second);
    alias_of_fd.erase(fd);
    auto it = endpoint_of_alias.find(alias);
    if (it == endpoint_of_alias.end()) return;  // that link was dropped already
    const std::string endpoint = it->second;
    spdlog::debug("control: connection to {} lost", endpoint);
    drop_link(endpoint);
    lost.push_back(endpoint);
  }

  // Under mu: one message from the outbound ROUTER (a peer's answer on our connection to it) into `inbox`.
  void read_out(std::vector<Inbound>& inbox) {
    auto parts = read_parts(out);
    if (parts.empty()) return;
    if (parts.size() != 2) {
      ++dropped_recv;
      return;
    }
    auto it = endpoint_of_alias.find(parts[0].to_string());
    if (it == endpoint_of_alias.end()) return;  // on a link dropped since: its frames go with it
    inbox.push_back({it->second, false, std::move(parts[1])});
  }

  // The descriptors polled, in the order they are read: ZAP before the ROUTER, so a handshake never waits
  // on frames. The set is fixed from start.
  std::vector<std::pair<int, Watch>> poll_set() {
    std::vector<std::pair<int, Watch>> set{{wake_fd, Watch::wake}};
    // CURVE only: a plain channel has no such sockets, and must not poll some other descriptor instead.
    if (zap) set.emplace_back(fd_of(zap), Watch::zap);
    if (router_monitor) set.emplace_back(fd_of(router_monitor), Watch::router_monitor);
    set.emplace_back(fd_of(router), Watch::router);
    set.emplace_back(fd_of(out_monitor), Watch::out_monitor);
    set.emplace_back(fd_of(out), Watch::out);
    return set;
  }

  // Under mu: reads what the entry watches, up to reads_per_wake messages. True when more may be waiting.
  bool read_watched(Watch kind, std::vector<Inbound>& inbox, std::vector<std::string>& lost) {
    for (int n = 0; n < reads_per_wake; ++n)
      if (!read_one(kind, inbox, lost)) return false;
    return true;
  }

  // Under mu: one message of the socket `kind` watches; false when it had none.
  bool read_one(Watch kind, std::vector<Inbound>& inbox, std::vector<std::string>& lost) {
    switch (kind) {
      case Watch::wake:
        return false;
      case Watch::zap:
        if (!readable(zap)) return false;
        answer_zap();
        return true;
      case Watch::router_monitor:
        if (!readable(router_monitor)) return false;
        read_router_monitor();
        return true;
      case Watch::router:
        if (!readable(router)) return false;
        read_router(inbox);
        return true;
      case Watch::out:
        if (!readable(out)) return false;
        read_out(inbox);
        return true;
      case Watch::out_monitor:
        if (!readable(out_monitor)) return false;
        read_out_monitor(lost);
        return true;
    }
    return false;
  }

  // Hands what arrived to the handlers, outside the lock (a handler may send).
  void dispatch(std::vector<Inbound>& inbox, std::vector<std::string>& lost) {
    for (auto& in : inbox) deliver(in);
    inbox.clear();
    for (const auto& ep : lost) {
      if (!on_disconnect) continue;
      try {
        on_disconnect(ep);
      } catch (const std::exception& e) {
        spdlog::error("control: disconnect handler failed for {}: {}", ep, e.what());
      }
    }
    lost.clear();
  }

  void drain_wake() {
    uint64_t counter;
    [[maybe_unused]] auto n = ::read(wake_fd, &counter, sizeof counter);
  }

  // The I/O thread waits on an epoll set of the channel's few sockets, made once: a wake-up reads what is
  // ready. A socket that had more than one turn's reads is read again without waiting.
  void loop() {
    std::vector<std::pair<int, Watch>> set;
    {
      std::lock_guard lock(mu);
      set = poll_set();
    }
    for (size_t i = 0; i < set.size(); ++i) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      if (::epoll_ctl(ep, EPOLL_CTL_ADD, set[i].first, &ev) != 0)
        spdlog::error("control: cannot poll descriptor {}: {}", set[i].first, std::strerror(errno));
    }
    std::vector<Inbound> inbox;
    std::vector<std::string> lost;
    std::vector<epoll_event> events(set.size());
    std::vector<bool> ready(set.size()), busy(set.size());
    bool any_busy = false;
    while (!stopping.load()) {
      bool look_now = false;
      {
        std::lock_guard lock(mu);
        look_now = look_again;
      }
      const bool again = any_busy || look_now;
      const int rc = ::epoll_wait(ep, events.data(), int(events.size()), again ? 0 : 200);
      if (rc < 0 && errno != EINTR) spdlog::error("control: epoll_wait failed: {}", std::strerror(errno));
      ready = busy;
      for (int i = 0; i < rc; ++i) {
        const size_t w = events[i].data.u64;
        if (set[w].second == Watch::wake)
          drain_wake();
        else
          ready[w] = true;
      }
      any_busy = false;
      {
        std::lock_guard lock(mu);
        // On the idle tick every socket is looked at too: a safety net. What it finds waited for the
        // tick, which means a lost signal (a defect): counted, logged once.
        const bool tick = rc == 0 && !again && !look_again;
        const bool all = std::exchange(look_again, false) || (rc == 0 && !again);
        for (size_t i = 0; i < set.size(); ++i) {
          busy[i] = (all || ready[i]) && read_watched(set[i].second, inbox, lost);
          any_busy = any_busy || busy[i];
        }
        if (tick && !inbox.empty()) {
          late_reads += inbox.size();
          if (first_time("late reads"))
            spdlog::warn("control: {} frames waited for the idle tick: a socket's signal was lost",
                         inbox.size());
        }
      }
      dispatch(inbox, lost);
    }
    close_sockets();
  }

  // On the hub's thread. A channel on a hub has a handful of sockets: every one is read each time.
  bool service(const std::function<void(const std::vector<int>&)>& watch, bool tick) override {
    std::vector<Inbound> inbox;
    std::vector<std::string> lost;
    bool more = false;
    drain_wake();
    {
      std::lock_guard lock(mu);
      if (closed || stopping.load()) return false;
      if (hub_set.empty()) {
        hub_set = poll_set();
        std::vector<int> fds;
        for (const auto& [fd, _] : hub_set) fds.push_back(fd);
        watch(fds);
      }
      look_again = false;
      for (const auto& [_, kind] : hub_set) more |= read_watched(kind, inbox, lost);
      if (tick && !inbox.empty()) late_reads += inbox.size();
    }
    dispatch(inbox, lost);
    return more;
  }
  std::vector<std::pair<int, Watch>> hub_set;  // what the hub polls for this channel (its thread only)

  // The outbound ROUTER and its monitor, attached before any connect so no event can be missed.
  Status make_out() {
    try {
      out = zmq::socket_t(*ctx, zmq::socket_type::router);
      out.set(zmq::sockopt::routing_id, config.identity);  // what every peer's ROUTER knows us by
      out.set(zmq::sockopt::linger, config.linger_ms);
      out.set(zmq::sockopt::router_mandatory, 1);
      out.set(zmq::sockopt::sndhwm, config.send_hwm);
      out.set(zmq::sockopt::maxmsgsize, config.max_frame_bytes);
      if (config.heartbeat_ivl_ms > 0) {
        out.set(zmq::sockopt::heartbeat_timeout, config.heartbeat_timeout_ms);
        out.set(zmq::sockopt::heartbeat_ttl, config.heartbeat_timeout_ms);
      }
      if (config.curve) {
        out.set(zmq::sockopt::curve_publickey, config.curve->public_key);
        out.set(zmq::sockopt::curve_secretkey, config.curve->secret_key);
      }
      // inproc addresses are per context: numbered hub-wide on a hub.
      const uint64_t number = hub ? ++hub->impl().monitors : 0;
      const std::string addr = "inproc://epd-out-monitor-" + std::to_string(number);
      const int events = ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
      if (zmq_socket_monitor(out.handle(), addr.c_str(), events) != 0) throw zmq::error_t();
      out_monitor = zmq::socket_t(*ctx, zmq::socket_type::pair);
      out_monitor.set(zmq::sockopt::linger, 0);
      // Unbounded: libzmq's I/O thread blocks on a full monitor queue, and a start connects thousands.
      out_monitor.set(zmq::sockopt::rcvhwm, 0);
      out_monitor.connect(addr);
      return {};
    } catch (const zmq::error_t& e) {
      return make_error(ErrorCode::io_error,
                        std::string("cannot make the control channel's sockets: ") + e.what());
    }
  }

  // Closes every socket; later sends are dropped. Queued frames still go out, bounded by linger.
  void close_sockets() {
    std::lock_guard lock(mu);
    closed = true;
    links.clear();
    if (out) zmq_socket_monitor(out.handle(), nullptr, 0);
    if (router_monitor) zmq_socket_monitor(router.handle(), nullptr, 0);
    out.close();
    out_monitor.close();
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
  if (impl->config.hub) {
    if (impl->config.curve)
      return make_error(ErrorCode::config_error,
                        "control: a CURVE channel cannot share a hub (one ZAP handler per ZeroMQ context)");
    impl->hub = impl->config.hub;
    impl->ctx = &impl->hub->impl().ctx;
  } else {
    try {
      impl->own_ctx = std::make_unique<zmq::context_t>(1, 1 << 15);  // sockets: see own_ctx
    } catch (const zmq::error_t& e) {  // out of descriptors: an error to report, not a crash
      return make_error(ErrorCode::io_error, std::string("cannot make a ZeroMQ context: ") + e.what());
    }
    impl->ctx = impl->own_ctx.get();
  }
  impl->handler = std::move(handler);
  impl->on_disconnect = std::move(on_disconnect);
  impl->wake_fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->wake_fd < 0) return make_error(ErrorCode::io_error, "eventfd failed");
  if (!impl->hub && (impl->ep = ::epoll_create1(EPOLL_CLOEXEC)) < 0)
    return make_error(ErrorCode::io_error, std::string("epoll_create1 failed: ") + std::strerror(errno));
  try {
    impl->router = zmq::socket_t(*impl->ctx, zmq::socket_type::router);
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
      impl->zap = zmq::socket_t(*impl->ctx, zmq::socket_type::rep);
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
      impl->router_monitor = zmq::socket_t(*impl->ctx, zmq::socket_type::pair);
      impl->router_monitor.set(zmq::sockopt::linger, 0);
      impl->router_monitor.connect(mon);
    }
    impl->router.bind(impl->config.bind_endpoint);
    impl->bound = impl->router.get(zmq::sockopt::last_endpoint);
  } catch (const zmq::error_t& e) {
    return make_error(ErrorCode::io_error,
                      "cannot bind control endpoint " + impl->config.bind_endpoint + ": " + e.what());
  }
  if (auto made = impl->make_out(); !made) return made.error();
  Impl* raw = impl.get();
  if (impl->hub)
    impl->hub_key = impl->hub->impl().attach(raw);
  else
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
  impl_->send(endpoint, frame);
}
void ControlChannel::reply(const std::string& routing_id, std::vector<uint8_t> frame) {
  impl_->reply(routing_id, frame);
}
void ControlChannel::forget(const std::string& endpoint) {
  impl_->forget(endpoint);
}

ChannelStats ControlChannel::stats() const {
  return {impl_->received.load(),     impl_->sent.load(),          impl_->dropped_send.load(),
          impl_->dropped_recv.load(), impl_->refused_peers.load(), impl_->late_reads.load()};
}

void ControlChannel::stop() {
  if (!impl_ || impl_->stopping.exchange(true)) return;
  if (impl_->hub) {
    impl_->hub->impl().detach(impl_->hub_key);
    impl_->close_sockets();
    return;  // the context is the hub's
  }
  impl_->wake();
  if (impl_->io.joinable()) impl_->io.join();
  impl_->own_ctx->close();
}

}  // namespace epd::transport

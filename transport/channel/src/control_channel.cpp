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

// A DEALER plus the PAIR socket its monitor reports disconnects on, with the file descriptors the I/O
// thread polls for them (ZMQ_FD: readable when the socket may have news; its ZMQ_EVENTS says which).
struct Dealer {
  zmq::socket_t socket;
  zmq::socket_t monitor;
  int fd = -1, monitor_fd = -1;
};

// What one poll entry watches.
enum class Watch : uint8_t { wake, router, zap, router_monitor, dealer, dealer_monitor };
struct Watched {
  Watch kind;
  std::string endpoint;  // dealer and dealer_monitor
};

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
// send() takes the lock and hands the frame to the DEALER itself (ZeroMQ's own I/O thread then writes it),
// so a frame crosses no thread of ours on the way out. The channel's I/O thread only reads: it polls the
// sockets' ZMQ_FDs without the lock, then takes it to read what arrived, and calls the handler after it is
// released (a handler may send). A socket's ZMQ_FD signals only "look at ZMQ_EVENTS", and any operation on
// the socket may consume that signal, so a caller whose send leaves a socket readable wakes the I/O thread.
struct ControlChannel::Impl final : detail::HubMember {
  ChannelConfig config;
  Handler handler;
  DisconnectHandler on_disconnect;
  // Sockets: the registry's process holds a DEALER and its monitor per member, which passes ZeroMQ's
  // default of 1,023 per context at about 500 members (epd-bench membership runs up to 10,000).
  // Made only without a hub: a context costs a descriptor (its mailbox) even with no socket in it.
  std::unique_ptr<zmq::context_t> own_ctx;
  std::shared_ptr<ChannelHub> hub;  // set: the hub's context and thread instead of ours
  uint64_t hub_key = 0;
  zmq::context_t* ctx = nullptr;
  zmq::socket_t router;
  zmq::socket_t zap;             // REP at zap_endpoint (CURVE only)
  zmq::socket_t router_monitor;  // handshake failures on the ROUTER (CURVE only)
  std::string bound;
  int wake_fd = -1;
  int ep = -1;  // the channel thread's epoll set (standalone channels)
  std::thread io;
  std::atomic<bool> stopping{false};
  std::atomic<uint64_t> received{0}, sent{0}, dropped_send{0}, dropped_recv{0}, refused_peers{0},
      late_reads{0};

  std::mutex mu;                          // guards every socket and everything below
  std::map<std::string, Dealer> dealers;  // endpoint -> socket
  std::vector<Dealer> retired;  // dropped by a caller; closed by the I/O thread once it polls no more
  std::set<std::string> logged_sources;  // refusals already logged (bounded)
  uint64_t monitors = 0;
  bool poll_set_changed = true;  // a dealer came or went: the I/O thread rebuilds what it polls
  bool look_at_all = true;       // a caller may have consumed a socket's signal: read every socket once
  bool look_at_router = false;   // ... the ROUTER's (answers go out on it): read it once
  bool closed = false;           // stop() closed the sockets: sends are dropped

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

  // Under mu. Null when the peer's public key is unknown (CURVE on): nothing can be sent to it.
  Dealer* dealer_for(const std::string& endpoint) {
    auto it = dealers.find(endpoint);
    if (it != dealers.end()) return &it->second;
    zmq::socket_t s(*ctx, zmq::socket_type::dealer);
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
    if (config.heartbeat_ivl_ms > 0 && (!config.heartbeats_to || config.heartbeats_to(endpoint))) {
      s.set(zmq::sockopt::heartbeat_ivl, config.heartbeat_ivl_ms);
      s.set(zmq::sockopt::heartbeat_timeout, config.heartbeat_timeout_ms);
      s.set(zmq::sockopt::heartbeat_ttl, config.heartbeat_timeout_ms);
    }
    // The monitor must be attached before connect so no disconnect can be missed.
    const uint64_t number = hub ? ++hub->impl().monitors : ++monitors;
    const std::string addr = "inproc://epd-monitor-" + std::to_string(number);
    // A failed handshake (the peer refused our key, or it is not who we think) is reported like a disconnect:
    // the peer is unreachable to us, and that must show rather than frames queueing forever.
    const int events = ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_HANDSHAKE_FAILED_AUTH |
                       ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL;
    if (zmq_socket_monitor(s.handle(), addr.c_str(), events) != 0) throw zmq::error_t();
    zmq::socket_t mon(*ctx, zmq::socket_type::pair);
    mon.set(zmq::sockopt::linger, 0);
    mon.connect(addr);
    s.connect(endpoint);
    Dealer d{std::move(s), std::move(mon)};
    d.fd = fd_of(d.socket);
    d.monitor_fd = fd_of(d.monitor);
    poll_set_changed = true;
    return &dealers.emplace(endpoint, std::move(d)).first->second;
  }

  // Under mu. The socket is closed later by the I/O thread, which may be polling its descriptor now.
  void drop_dealer(const std::string& endpoint) {
    auto it = dealers.find(endpoint);
    if (it == dealers.end()) return;
    zmq_socket_monitor(it->second.socket.handle(), nullptr, 0);
    // Queued frames are for a peer we consider gone: discard them rather than deliver them to whatever
    // restarts on that endpoint.
    it->second.socket.set(zmq::sockopt::linger, 0);
    retired.push_back(std::move(it->second));
    dealers.erase(it);
    poll_set_changed = true;
  }

  // Any thread: runs `use` on the sockets under the lock, unless stop() closed them (then the frame is
  // dropped and counted). `use` returns the socket it sent on (null: none). The I/O thread is woken when it
  // must look again: a new socket to poll, or the socket left readable (see the threading note).
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
      if (used && readable(*used)) (used == &router ? look_at_router : look_at_all) = true;
      wake_io = look_at_all || look_at_router || poll_set_changed;
    }
    if (wake_io) wake();
  }

  void send(const std::string& endpoint, std::vector<uint8_t>& frame) {
    with_sockets([&]() -> zmq::socket_t* {
      try {
        Dealer* d = dealer_for(endpoint);
        if (!d) {
          ++dropped_send;
          return nullptr;
        }
        if (d->socket.send(zmq::buffer(frame), zmq::send_flags::dontwait)) {
          ++sent;
        } else {
          ++dropped_send;
          spdlog::warn("control: queue to {} is full, dropped a {}-byte frame", endpoint, frame.size());
        }
        return &d->socket;
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
      drop_dealer(endpoint);
    }
    wake();  // so the retired socket is closed soon
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

  // Under mu: the dealer's monitor reported a lost connection (or a failed handshake); the dealer is
  // dropped and `lost` gets its endpoint for the disconnect handler.
  void read_dealer_monitor(const std::string& endpoint, Dealer& d, std::vector<std::string>& lost) {
    auto parts = read_parts(d.monitor);
    if (parts.empty() || parts[0].size() < sizeof(uint16_t)) return;
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
    lost.push_back(endpoint);
  }

  // Under mu: what the I/O thread polls (outside the lock), rebuilt when a dealer came or went.
  void rebuild_poll_set(std::vector<int>& fds, std::vector<Watched>& watched) {
    fds.clear();
    watched.clear();
    auto add = [&](int fd, Watch kind, const std::string& endpoint = {}) {
      fds.push_back(fd);
      watched.push_back({kind, endpoint});
    };
    add(wake_fd, Watch::wake);
    // CURVE only: a plain channel has no such sockets, and must not poll some other descriptor instead.
    // ZAP comes first, so it is answered before anything else is read: a handshake waits on it.
    if (zap) add(fd_of(zap), Watch::zap);
    if (router_monitor) add(fd_of(router_monitor), Watch::router_monitor);
    add(fd_of(router), Watch::router);
    for (auto& [ep, d] : dealers) {
      add(d.fd, Watch::dealer, ep);
      add(d.monitor_fd, Watch::dealer_monitor, ep);
    }
    poll_set_changed = false;
  }

  // Under mu: reads what the entry watches, up to reads_per_wake messages. True when more may be waiting.
  bool read_watched(const Watched& w, std::vector<Inbound>& inbox, std::vector<std::string>& lost) {
    for (int n = 0; n < reads_per_wake; ++n) {
      switch (w.kind) {
        case Watch::wake:
          return false;
        case Watch::zap:
          if (!readable(zap)) return false;
          answer_zap();
          break;
        case Watch::router_monitor:
          if (!readable(router_monitor)) return false;
          read_router_monitor();
          break;
        case Watch::router:
          if (!readable(router)) return false;
          read_router(inbox);
          break;
        case Watch::dealer:
        case Watch::dealer_monitor: {
          auto it = dealers.find(w.endpoint);  // it may have been dropped since the poll set was built
          if (it == dealers.end()) return false;
          Dealer& d = it->second;
          if (w.kind == Watch::dealer_monitor) {
            if (!readable(d.monitor)) return false;
            read_dealer_monitor(w.endpoint, d, lost);
            return false;  // the dealer is gone
          }
          if (!readable(d.socket)) return false;
          auto parts = read_parts(d.socket);
          if (parts.size() == 1)
            inbox.push_back({w.endpoint, false, std::move(parts[0])});
          else if (!parts.empty())
            ++dropped_recv;
          break;
        }
      }
    }
    return true;
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

  // The I/O thread waits on an epoll set updated whenever a dealer comes or goes, so a wake-up costs what
  // is ready, not every socket: the registry's process holds two sockets per member, and a poll() of all
  // of them per heartbeat made each heartbeat O(members).
  void loop() {
    std::vector<int> fds;
    std::vector<Watched> watched;
    std::unordered_map<int, size_t> index_of;  // descriptor -> its entry in watched
    std::vector<Inbound> inbox;
    std::vector<std::string> lost;
    std::vector<epoll_event> events(256);
    std::vector<size_t> ready, busy;  // indices into watched: signalled; had more than one turn's reads
    std::set<int> polled;             // what the epoll set holds
    std::vector<int> closed;          // descriptors of retired sockets, closed now or soon
    while (!stopping.load()) {
      bool rebuilt = false, look_now = false;
      std::vector<int> busy_fds;
      {
        std::lock_guard lock(mu);
        for (const auto& d : retired) closed.insert(closed.end(), {d.fd, d.monitor_fd});
        retired.clear();  // not polled since the last update below
        if (poll_set_changed) {
          for (size_t i : busy) busy_fds.push_back(fds[i]);
          busy.clear();  // its indices are the old list's
          rebuild_poll_set(fds, watched);
          rebuilt = true;
        }
        look_now = look_at_all || look_at_router;
      }
      if (rebuilt) {
        // One set for the channel's life (made at start, so no descriptor is needed here), changed by what
        // came and went only: redoing it whole per new DEALER made a router's start O(members^2) in
        // syscalls. A retired socket's descriptor may be closed already (the kernel then dropped it from the
        // set) and its number a new socket's: such a number is taken out and put in again.
        for (int fd : closed)
          if (polled.erase(fd)) ::epoll_ctl(ep, EPOLL_CTL_DEL, fd, nullptr);
        closed.clear();
        index_of.clear();
        for (size_t i = 0; i < fds.size(); ++i) index_of[fds[i]] = i;
        for (auto it = polled.begin(); it != polled.end();) {
          if (index_of.count(*it)) {
            ++it;
            continue;
          }
          ::epoll_ctl(ep, EPOLL_CTL_DEL, *it, nullptr);
          it = polled.erase(it);
        }
        for (size_t i = 0; i < fds.size(); ++i) {
          if (!polled.insert(fds[i]).second) continue;
          epoll_event ev{};
          ev.events = EPOLLIN;
          ev.data.fd = fds[i];
          if (::epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) != 0)
            spdlog::error("control: cannot poll descriptor {}: {}", fds[i], std::strerror(errno));
          busy.push_back(i);  // a new socket's first signal may have gone before it was polled
        }
        for (int fd : busy_fds)
          if (auto it = index_of.find(fd); it != index_of.end()) busy.push_back(it->second);
      }
      const bool again = !busy.empty() || look_now;
      const int rc = ::epoll_wait(ep, events.data(), int(events.size()), again ? 0 : 200);
      if (rc < 0 && errno != EINTR) spdlog::error("control: epoll_wait failed: {}", std::strerror(errno));
      ready.swap(busy);
      busy.clear();
      for (int i = 0; i < rc; ++i) {
        auto it = index_of.find(events[i].data.fd);
        if (it == index_of.end()) continue;  // not ours (cannot happen: the set changes only above)
        const size_t w = it->second;
        if (w == 0)
          drain_wake();
        else
          ready.push_back(w);
      }
      {
        std::lock_guard lock(mu);
        // On the idle tick every socket is looked at too: a safety net. What it finds waited for the
        // tick, which means a lost signal (a defect): counted, logged once.
        const bool tick = rc == 0 && !again && !look_at_all && !look_at_router;
        const bool all = std::exchange(look_at_all, false) || (rc == 0 && !again);
        if (std::exchange(look_at_router, false)) ready.push_back(router_index(watched));
        if (all) {
          ready.resize(watched.size());
          for (size_t i = 0; i < ready.size(); ++i) ready[i] = i;
        } else {
          // In the order they are listed: ZAP before the ROUTER, so a handshake never waits on frames.
          std::sort(ready.begin(), ready.end());
          ready.erase(std::unique(ready.begin(), ready.end()), ready.end());
        }
        for (size_t i : ready)
          if (read_watched(watched[i], inbox, lost)) busy.push_back(i);
        if (tick && !inbox.empty()) {
          late_reads += inbox.size();
          if (first_time("late reads"))
            spdlog::warn("control: {} frames waited for the idle tick: a socket's signal was lost",
                         inbox.size());
        }
      }
      ready.clear();
      dispatch(inbox, lost);
    }
    close_sockets();
  }

  static size_t router_index(const std::vector<Watched>& watched) {
    for (size_t i = 0; i < watched.size(); ++i)
      if (watched[i].kind == Watch::router) return i;
    return 0;
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
      if (poll_set_changed) {
        rebuild_poll_set(hub_fds, hub_watched);
        watch(hub_fds);  // before the retired sockets close: their descriptors may be reused at once
      }
      retired.clear();
      look_at_all = look_at_router = false;
      for (const auto& w : hub_watched) more |= read_watched(w, inbox, lost);
      if (tick && !inbox.empty()) late_reads += inbox.size();
    }
    dispatch(inbox, lost);
    return more;
  }
  std::vector<int> hub_fds;  // what the hub polls for this channel (its thread only)
  std::vector<Watched> hub_watched;

  // Closes every socket; later sends are dropped. Queued frames still go out, bounded by linger.
  void close_sockets() {
    std::lock_guard lock(mu);
    closed = true;
    retired.clear();
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

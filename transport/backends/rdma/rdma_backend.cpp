// The RDMA (ibverbs) backend: one-sided RDMA WRITEs over RC QPs into the peer's registered regions
// (docs/transport.md, "RDMA backend"). Offered only when a usable device exists.
#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <thread>
#include <unordered_map>

#include "epd/transport/backend_info.hpp"
#include "link.hpp"
#include "qp.hpp"
#include "rdma_info.hpp"
#include "rdma_options.hpp"

namespace epd::transport {
namespace rdma {
namespace {

constexpr auto kTick = std::chrono::milliseconds(100);  // bound of every wait in the backend's threads

// A peer's connection to us: the responder QPs we made for it, alive as long as its side channel is.
struct Passive {
  int fd = -1;
  std::vector<ibv_qp*> qps;
  std::vector<uint8_t> buf;  // a grant query arriving
};

// True when the device moved the responder QP to error: it refused a write (a revoked grant's rkey, a range
// outside every registration) or a malformed request; it accepts nothing more.
bool in_error(ibv_qp* qp) {
  ibv_qp_attr a{};
  ibv_qp_init_attr init{};
  return ibv_query_qp(qp, &a, IBV_QP_STATE, &init) == 0 && a.qp_state == IBV_QPS_ERR;
}

class RdmaBackend final : public Backend {
 public:
  RdmaBackend(std::shared_ptr<Core> core, int listen_fd, std::string endpoint, uint64_t token,
              uint64_t incarnation, std::shared_ptr<FenceTable> fences)
      : core_(std::move(core)),
        fences_(fences ? std::move(fences) : std::make_shared<FenceTable>()),
        listen_fd_(listen_fd),
        endpoint_(std::move(endpoint)),
        token_(token),
        incarnation_(incarnation) {
    completion_ = std::thread([this] { completion_loop(); });
    handshake_ = std::thread([this] { handshake_loop(); });
  }

  ~RdmaBackend() override {
    stop_ = true;
    completion_.join();
    handshake_.join();
    for (auto& link : live_links()) link->close();
    for (auto& p : passive_) drop(p);
    for (auto& h : pending_) ::close(h.fd);
    ::close(listen_fd_);
    std::lock_guard lock(grants_mu_);
    for (auto& [key, mrs] : grants_)
      for (ibv_mr* mr : mrs) ibv_dereg_mr(mr);
  }

  std::vector<uint8_t> connection_info(std::span<const Region* const> regions) const override {
    const Device& d = *core_->dev;
    RdmaInfo info{
        d.name(),  d.port(), uint32_t(d.gid_index()), std::vector<uint8_t>(d.gid().begin(), d.gid().end()),
        endpoint_, {}};
    // A fenced region's rkey is 0: a writer gets keys only for the runs of a grant (grant query).
    for (const Region* r : regions) {
      const uint32_t rkey = r->fence_unit > 0 ? 0 : r->rkey != 0 ? r->rkey : d.rkey_for(r->addr(), r->length);
      info.regions.push_back({r->id, rkey});
    }
    return encode_info(info);
  }

  // My own descriptor need not offer rdma: an engine that only writes (force = rdma) still has the device.
  bool can_reach(const protocol::SegmentDescriptor& /*self*/,
                 const protocol::SegmentDescriptor& peer) const override {
    const auto info = decode_info<RdmaInfo>(peer, kName);
    if (!info || info->gid.size() != 16 || info->handshake_endpoint.empty()) return false;
    // RoCE v2 over IPv4 cannot reach an IPv6-only GID and vice versa.
    Gid theirs{};
    std::copy(info->gid.begin(), info->gid.end(), theirs.begin());
    return is_ipv4_mapped(theirs) == is_ipv4_mapped(core_->dev->gid());
  }

  // A fenced region is registered for local access only (its lkey serves writes out of it): its whole-
  // region rkey would let a stale writer past every revocation.
  Status on_region_added(Region& region) override {
    const bool fenced = region.fence_unit > 0;
    auto mr = core_->dev->register_memory(region.base, region.length, !fenced);
    if (!mr) return mr.error();
    region.lkey = (*mr)->lkey;
    region.rkey = fenced ? 0 : (*mr)->rkey;
    return {};
  }

  // After this returns, the device refuses every write under the key's rkeys (ibv_dereg_mr is synchronous
  // with the device), so the units may be reused.
  void revoke_grant(uint64_t key) override {
    std::lock_guard lock(grants_mu_);
    auto it = grants_.find(key);
    if (it == grants_.end()) return;
    for (ibv_mr* mr : it->second) ibv_dereg_mr(mr);
    grants_.erase(it);
  }

  Result<std::unique_ptr<Link>> connect(const protocol::SegmentDescriptor& peer) override {
    auto state = std::make_shared<LinkState>(core_, peer);
    if (auto st = state->connect(); !st) return st.error();
    {
      std::lock_guard lock(core_->mu);
      core_->links.push_back(state);
    }
    return std::unique_ptr<Link>(new RdmaLink(std::move(state)));
  }
  // New handshakes need the new token; the responder QPs of every link opened under the old one are
  // destroyed (by the handshake thread, within a tick), so their writers' next writes fail: without a
  // connected QP of ours, our rkeys are useless to them.
  void set_token(uint64_t token) override {
    token_.store(token, std::memory_order_release);
    drop_passive_.store(true, std::memory_order_release);
  }

 private:
  std::vector<std::shared_ptr<LinkState>> live_links() {
    std::lock_guard lock(core_->mu);
    std::vector<std::shared_ptr<LinkState>> out;
    std::erase_if(core_->links, [&](const auto& w) {
      auto s = w.lock();
      if (!s) return true;  // its session is gone
      out.push_back(std::move(s));
      return false;
    });
    return out;
  }

  void completion_loop() {
    Device& d = *core_->dev;
    fcntl(d.channel()->fd, F_SETFL, fcntl(d.channel()->fd, F_GETFL) | O_NONBLOCK);
    auto last_check = Clock::now();
    ibv_wc wcs[32];
    while (!stop_) {
      pollfd p{d.channel()->fd, POLLIN, 0};
      if (poll(&p, 1, int(kTick.count())) > 0) {
        ibv_cq* cq = nullptr;
        void* ctx = nullptr;
        if (ibv_get_cq_event(d.channel(), &cq, &ctx) == 0) {
          ibv_ack_cq_events(cq, 1);
          ibv_req_notify_cq(cq, 0);
        }
      }
      // Drain after re-arming, so a completion that raced the notification is not left behind.
      for (int n; (n = ibv_poll_cq(d.cq(), 32, wcs)) > 0;) {
        for (int i = 0; i < n; ++i) {
          std::shared_ptr<LinkState> link;
          {
            std::lock_guard lock(core_->mu);
            auto it = core_->by_qpn.find(wcs[i].qp_num);
            if (it != core_->by_qpn.end()) link = it->second.lock();
          }
          if (link) link->on_completion(wcs[i]);
        }
      }
      const auto now = Clock::now();
      if (now - last_check >= kTick) {
        last_check = now;
        for (auto& link : live_links()) link->check(now);
      }
    }
  }

  // One thread serves every peer's side channel without blocking on any of them: accepted connections
  // wait in pending_ until their whole request has arrived (or op_timeout passes), so a slow or silent
  // peer never holds up another peer's handshake.
  void handshake_loop() {
    std::vector<pollfd> fds;
    auto last_qp_check = Clock::now();
    while (!stop_) {
      if (drop_passive_.exchange(false, std::memory_order_acq_rel)) {
        for (auto& p : passive_) drop(p);
        passive_.clear();
      }
      if (const auto now = Clock::now(); now - last_qp_check >= kTick) {
        last_qp_check = now;
        drop_refused();
      }
      fds.assign(1, pollfd{listen_fd_, POLLIN, 0});
      for (auto& p : passive_) fds.push_back({p.fd, POLLIN | POLLRDHUP, 0});
      for (auto& h : pending_) fds.push_back({h.fd, POLLIN | POLLRDHUP, 0});
      const size_t first_pending = 1 + passive_.size();
      const int ready = poll(fds.data(), fds.size(), int(kTick.count()));
      const auto now = Clock::now();
      // Requests that arrived whole (or broke), and requests out of time (answered as malformed).
      for (size_t i = pending_.size(); i-- > 0;) {
        Pending& h = pending_[i];
        if (ready > 0 && fds[first_pending + i].revents) read_pending(h);
        if (h.done || h.failed || now >= h.deadline) {
          Result<Hello> req = make_error(ErrorCode::transfer_failed, "rdma handshake: incomplete request");
          if (h.done) req = decode_hello(h.buf);
          serve(h.fd, req);
          pending_.erase(pending_.begin() + long(i));
        }
      }
      if (ready <= 0) continue;
      // Grant queries are answered; peers whose side channel closed are gone (or closed their link): drop
      // their QPs.
      for (size_t i = passive_.size(); i-- > 0;) {
        if (fds[1 + i].revents && !serve_passive(passive_[i])) {
          drop(passive_[i]);
          passive_.erase(passive_.begin() + long(i));
        }
      }
      if (fds[0].revents & POLLIN) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
        // The requester waits as long (link.cpp): at least 500 ms, even with op_timeout 0.
        const auto wait = std::max(core_->cfg.op_timeout, std::chrono::milliseconds(500));
        if (fd >= 0) pending_.push_back(Pending{fd, {}, kHelloFixedBytes, now + wait});
      }
    }
  }

  // A handshake request still arriving on its own (non-blocking) connection.
  struct Pending {
    int fd = -1;
    std::vector<uint8_t> buf;
    size_t need = 0;  // bytes of the whole request (the fixed part until its header is in)
    Clock::time_point deadline;
    bool done = false;    // the whole request is in buf
    bool failed = false;  // closed, unreadable or a bad header before that
  };

  // Takes what the connection has, without blocking.
  static void read_pending(Pending& h) {
    while (!h.done && !h.failed) {
      const size_t at = h.buf.size();
      h.buf.resize(h.need);
      const ssize_t n = recv(h.fd, h.buf.data() + at, h.need - at, MSG_DONTWAIT);
      h.buf.resize(at + size_t(n > 0 ? n : 0));
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
      if (n <= 0) {
        h.failed = true;
        return;
      }
      if (h.buf.size() < h.need) continue;
      if (h.need == kHelloFixedBytes) {
        auto tail = hello_tail_bytes(h.buf);
        if (!tail) {
          h.failed = true;
          return;
        }
        h.need += *tail;
      }
      h.done = h.buf.size() == h.need;
    }
  }

  // Answers one handshake request, whole or failed (a reject); the reply is small enough for the socket's
  // send buffer, so the write does not wait on the peer.
  void serve(int fd, const Result<Hello>& req) {
    const auto deadline = Clock::now() + std::min(core_->cfg.op_timeout, std::chrono::milliseconds(2000));
    Hello rep;
    rep.kind = HelloKind::reject;
    Device& d = *core_->dev;
    Passive p{fd, {}, {}};
    if (!req || req->kind != HelloKind::request) {
      rep.reason = HandshakeReject::malformed;
    } else if (const uint64_t token = token_.load(std::memory_order_acquire);
               token != 0 && req->target_token != token) {
      rep.reason = HandshakeReject::bad_token;
    } else if (incarnation_ != 0 && req->target_incarnation != incarnation_) {
      rep.reason = HandshakeReject::stale_incarnation;
    } else {
      rep.kind = HelloKind::accept;
      rep.mtu = uint8_t(d.active_mtu());
      rep.lid = d.lid();
      rep.gid = d.gid();
      const ibv_mtu mtu = min_mtu(d.active_mtu(), ibv_mtu(req->mtu));
      for (const auto& q : req->qps) {
        auto qp = create_rc_qp(d, 1);  // responder only: it never sends
        const uint32_t psn = random_psn();
        if (qp) p.qps.push_back(*qp);
        if (!qp || !connect_qp(*qp, d, psn, RemoteQp{q.qpn, q.psn, req->gid, req->lid, mtu})) {
          rep = Hello{};
          rep.kind = HelloKind::reject;
          rep.reason = HandshakeReject::no_resources;
          break;
        }
        rep.qps.push_back({(*qp)->qp_num, psn});
      }
    }
    if (rep.kind == HelloKind::reject) {
      spdlog::warn("rdma: refused a handshake (reason {})", int(rep.reason));
      (void)write_all(fd, encode_hello(rep), deadline);
      drop(p);
      return;
    }
    if (!write_all(fd, encode_hello(rep), deadline)) {
      drop(p);
      return;
    }
    passive_.push_back(std::move(p));
  }

  // Reads what a peer's side channel has: answers each whole grant query. False: closed, failed or garbage
  // (the peer is gone or broken; drop it).
  bool serve_passive(Passive& p) {
    uint8_t chunk[256];
    for (;;) {
      const ssize_t n = recv(p.fd, chunk, sizeof chunk, MSG_DONTWAIT);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EAGAIN) break;
      if (n <= 0) return false;
      p.buf.insert(p.buf.end(), chunk, chunk + n);
    }
    size_t at = 0;
    for (; p.buf.size() - at >= kGrantQueryBytes; at += kGrantQueryBytes) {
      auto key = decode_grant_query(std::span(p.buf).subspan(at, kGrantQueryBytes));
      if (!key) return false;
      const auto runs = grant_runs(*key);
      const auto deadline = Clock::now() + std::min(core_->cfg.op_timeout, std::chrono::milliseconds(2000));
      if (!write_all(p.fd, encode_grant_reply(runs), deadline)) return false;
    }
    p.buf.erase(p.buf.begin(), p.buf.begin() + long(at));
    return true;
  }

  // The registrations of a live grant, one per contiguous run it owns, made on first ask (a writer over tcp
  // costs none). None: the key is unknown or revoked, and the write that needed it is refused (counted).
  std::vector<GrantRun> grant_runs(uint64_t key) {
    std::vector<GrantRun> runs;
    std::lock_guard lock(grants_mu_);  // revoke_grant waits: no registration outlives a revocation
    const auto ranges = fences_->ranges(key);
    if (ranges.empty()) {
      fences_->count_refused();
      return runs;
    }
    auto& mrs = grants_[key];
    for (auto [addr, len] : ranges) {
      auto it = std::find_if(mrs.begin(), mrs.end(), [&](ibv_mr* mr) {
        return reinterpret_cast<uint64_t>(mr->addr) == addr && mr->length == len;
      });
      ibv_mr* mr = it != mrs.end() ? *it : nullptr;
      if (!mr) {
        auto reg = core_->dev->register_grant(reinterpret_cast<void*>(addr), len);
        if (!reg) {
          spdlog::warn("rdma: grant {:016x} not registered ({}); its writer is refused", key,
                       reg.error().to_string());
          return {};
        }
        mr = *reg;
        mrs.push_back(mr);
      }
      runs.push_back({addr, len, mr->rkey});
    }
    return runs;
  }

  // Drops the peers whose responder QP the device moved to error (a refused write): counted as refused
  // writes; their writers reconnect with fresh QPs.
  void drop_refused() {
    for (size_t i = passive_.size(); i-- > 0;) {
      if (std::none_of(passive_[i].qps.begin(), passive_[i].qps.end(), in_error)) continue;
      drop(passive_[i]);
      passive_.erase(passive_.begin() + long(i));
    }
  }

  // Destroys a peer's QPs; one the device had moved to error refused a write (counted once per QP).
  void drop(Passive& p) {
    for (ibv_qp* qp : p.qps)
      if (in_error(qp)) fences_->count_refused();
    for (ibv_qp* qp : p.qps) ibv_destroy_qp(qp);
    p.qps.clear();
    if (p.fd >= 0) ::close(p.fd);
    p.fd = -1;
  }

  const std::shared_ptr<Core> core_;
  const std::shared_ptr<FenceTable> fences_;
  std::mutex grants_mu_;
  std::unordered_map<uint64_t, std::vector<ibv_mr*>> grants_;  // fence key -> its registrations
  const int listen_fd_;
  const std::string endpoint_;
  // Peers must present these in their handshake: a stale descriptor (we restarted) is refused.
  std::atomic<uint64_t> token_;
  std::atomic<bool> drop_passive_{false};  // set_token asks the handshake thread to drop passive_
  const uint64_t incarnation_;
  std::atomic<bool> stop_{false};
  std::vector<Passive> passive_;  // handshake thread only (and the destructor after the join)
  std::vector<Pending> pending_;  // handshake thread only (and the destructor after the join)
  std::thread completion_;
  std::thread handshake_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_backend(const BackendContext& ctx) {
  auto parsed = parse_rdma_options(ctx.config.options, ctx.config.host);
  if (!parsed) return parsed.error();
  const RdmaConfig& cfg = *parsed;
  auto dev = rdma::Device::open(cfg);
  if (!dev) return dev.error();
  uint16_t port = 0;
  auto fd = rdma::listen_tcp(cfg.handshake_host, cfg.handshake_port, port);
  if (!fd) return fd.error();
  auto core = std::make_shared<rdma::Core>();
  core->dev = *dev;
  core->cfg = cfg;
  const std::string host =
      cfg.handshake_host.find(':') != std::string::npos ? "[" + cfg.handshake_host + "]" : cfg.handshake_host;
  const std::string endpoint = host + ":" + std::to_string(port);
  const auto& d = *core->dev;
  spdlog::info("rdma: device {} port {} gid[{}] {} mtu {}, {} QPs/peer, slice {} B, handshake on {}",
               d.name(), d.port(), d.gid_index(), rdma::gid_to_string(d.gid()), 128 << int(d.active_mtu()),
               cfg.qps_per_peer, cfg.slice_bytes, endpoint);
  return std::unique_ptr<Backend>(
      new rdma::RdmaBackend(std::move(core), *fd, endpoint, ctx.token, ctx.incarnation, ctx.fences));
}

}  // namespace rdma

}  // namespace epd::transport

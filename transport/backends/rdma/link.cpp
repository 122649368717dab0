#include "link.hpp"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "epd/transport/backend_info.hpp"
#include "qp.hpp"

namespace epd::transport::rdma {

void LinkState::Outcomes::apply() {
  for (auto& b : done) b->part_done();
  for (auto& [b, err] : failed) b->fail(err);
}

LinkState::LinkState(std::shared_ptr<Core> core, protocol::SegmentDescriptor peer)
    : core_(std::move(core)), peer_(std::move(peer)), info_(decode_info<RdmaInfo>(peer_, kName)) {
  if (info_)
    for (const auto& r : info_->regions) rkeys_[r.id] = r.rkey;
}

uint32_t LinkState::rkey_of(const protocol::RegionDesc& region) const {
  auto it = rkeys_.find(region.id);
  return it == rkeys_.end() ? 0 : it->second;
}

LinkState::~LinkState() {
  teardown_locked();
}

std::string LinkState::where() const {
  return "rdma link to " + peer_.instance_id;
}

Status LinkState::connect() {
  std::lock_guard lock(mu_);
  return connect_locked();
}

Status LinkState::connect_locked() {
  teardown_locked();
  if (closed_) return make_error(ErrorCode::session_closed, where() + " is closed");
  if (!info_ || info_->gid.size() != 16)
    return make_error(ErrorCode::no_common_backend, peer_.instance_id + " offers no rdma");
  Device& dev = *core_->dev;
  const auto& cfg = core_->cfg;
  const uint32_t n = std::clamp<uint32_t>(cfg.qps_per_peer, 1, kMaxQpsPerLink);
  max_wr_ = std::max<uint32_t>(1, std::min(cfg.max_outstanding_wr, dev.max_qp_wr()));
  {
    std::lock_guard clock(core_->mu);
    const int need = int(n * max_wr_);
    if (core_->reserved_cqe + need > dev.cq_capacity()) {
      return make_error(ErrorCode::out_of_capacity, "rdma completion queue full (" +
                                                        std::to_string(dev.cq_capacity()) +
                                                        " entries): too many links or max_outstanding_wr");
    }
    core_->reserved_cqe += need;
    reserved_ = need;
  }
  const auto deadline = Clock::now() + std::max(cfg.op_timeout, std::chrono::milliseconds(500));
  auto fd = connect_tcp(info_->handshake_endpoint, deadline);
  if (!fd) {
    teardown_locked();
    return fd.error();
  }
  fd_ = *fd;

  Hello req;
  req.kind = HelloKind::request;
  req.mtu = uint8_t(dev.active_mtu());
  req.lid = dev.lid();
  req.gid = dev.gid();
  req.target_incarnation = peer_.incarnation;
  req.target_token = peer_.token;
  for (uint32_t i = 0; i < n; ++i) {
    auto qp = create_rc_qp(dev, max_wr_);
    if (!qp) {
      teardown_locked();
      return qp.error();
    }
    qps_.push_back(*qp);
    outstanding_.push_back(0);
    req.qps.push_back({(*qp)->qp_num, random_psn()});
  }
  auto fail = [&](Error e) {
    teardown_locked();
    e.detail = where() + ": " + e.detail;
    return e;
  };
  if (auto st = write_all(fd_, encode_hello(req), deadline); !st) return fail(st.error());
  auto rep = read_hello(fd_, deadline);
  if (!rep) return fail(rep.error());
  if (rep->kind == HelloKind::reject) {
    switch (rep->reason) {
      case HandshakeReject::bad_token:
        return fail(make_error(ErrorCode::bad_token, "peer rejected our token"));
      case HandshakeReject::stale_incarnation:
        return fail(make_error(ErrorCode::incarnation_changed, "peer restarted (stale descriptor)"));
      case HandshakeReject::no_resources:
        return fail(make_error(ErrorCode::out_of_capacity, "peer could not create QPs"));
      default:
        return fail(make_error(ErrorCode::transfer_failed, "peer rejected the handshake"));
    }
  }
  if (rep->kind != HelloKind::accept || rep->qps.size() != n)
    return fail(make_error(ErrorCode::transfer_failed, "bad handshake reply"));
  const ibv_mtu mtu = min_mtu(dev.active_mtu(), ibv_mtu(rep->mtu));
  for (uint32_t i = 0; i < n; ++i) {
    RemoteQp r{rep->qps[i].qpn, rep->qps[i].psn, rep->gid, rep->lid, mtu};
    if (auto st = connect_qp(qps_[i], dev, req.qps[i].psn, r); !st) return fail(st.error());
  }
  {
    std::lock_guard clock(core_->mu);
    for (ibv_qp* qp : qps_) core_->by_qpn[qp->qp_num] = weak_from_this();
  }
  broken_ = false;
  spdlog::debug("{}: connected, {} QPs, mtu {}", where(), n, 128 << int(mtu));
  return {};
}

void LinkState::teardown_locked() {
  if (!qps_.empty()) {
    std::lock_guard clock(core_->mu);
    for (ibv_qp* qp : qps_) core_->by_qpn.erase(qp->qp_num);
  }
  for (ibv_qp* qp : qps_) ibv_destroy_qp(qp);
  qps_.clear();
  outstanding_.clear();
  if (fd_ >= 0) ::close(fd_);  // the peer sees EOF and drops its responder QPs
  fd_ = -1;
  if (reserved_) {
    std::lock_guard clock(core_->mu);
    core_->reserved_cqe -= reserved_;
    reserved_ = 0;
  }
}

void LinkState::submit(const BatchPtr& batch, std::span<const ResolvedOp> ops) {
  Outcomes out;
  {
    std::lock_guard lock(mu_);
    auto refuse = [&](Error e) { out.failed.emplace_back(batch, std::move(e)); };
    if (closed_) {
      refuse(make_error(ErrorCode::session_closed, where() + " is closed"));
    } else {
      // The engine validated already; the backend re-checks what it is about to hand to the NIC.
      for (const auto& op : ops) {
        const auto* r = op.remote_region;
        if (!r || op.remote_addr < r->base || op.len > r->length ||
            op.remote_addr - r->base > r->length - op.len) {
          refuse(make_error(ErrorCode::out_of_range, where() + ": remote range outside the peer's region"));
          break;
        }
        if (op.len &&
            ((rkey_of(*r) == 0 && op.fence == 0) || !op.local_region || op.local_region->lkey == 0)) {
          // rkey 0 and no grant: the peer's region is fenced (or not registered).
          Error e =
              make_error(ErrorCode::transfer_failed,
                         where() + ": region not registered with the device, or fenced and no grant given");
          e.retryable = false;
          refuse(std::move(e));
          break;
        }
      }
    }
    if (out.failed.empty() && (broken_ || qps_.empty())) {
      if (auto st = connect_locked(); !st) {
        broken_ = true;
        refuse(st.error());
      }
    }
    // Each op's rkey: its region's, or for a fenced region the one of its grant's run holding it.
    std::vector<std::pair<uint32_t, uint64_t>> keys(ops.size());  // (rkey, fence)
    for (size_t i = 0; i < ops.size() && out.failed.empty(); ++i) {
      const auto& op = ops[i];
      if (op.len == 0) continue;
      if (const uint32_t rkey = rkey_of(*op.remote_region); rkey != 0) {
        keys[i] = {rkey, 0};
        continue;
      }
      auto rkey = grant_rkey_locked(op.fence, op.remote_addr, op.len);
      if (rkey) {
        keys[i] = {*rkey, op.fence};
      } else if (rkey.error().code == ErrorCode::fenced) {
        refuse(rkey.error());
      } else {
        out.failed.emplace_back(batch, rkey.error());
        break_locked(rkey.error(), out);  // the side channel failed: the link is gone
      }
    }
    if (out.failed.empty()) {
      const uint64_t slice = std::clamp<uint64_t>(core_->cfg.slice_bytes, 1, 1u << 30);
      uint64_t slices = 0;
      for (size_t i = 0; i < ops.size(); ++i) {
        const auto& op = ops[i];
        for (uint64_t off = 0; off < op.len; off += slice) {
          const auto len = uint32_t(std::min(slice, op.len - off));
          queue_.push_back({batch, reinterpret_cast<uint64_t>(op.src) + off, len, op.local_region->lkey,
                            op.remote_addr + off, keys[i].first, keys[i].second});
          ++slices;
        }
      }
      // The engine counts one part per op; each slice reports one part.
      if (slices > ops.size()) batch->add_parts(slices - ops.size());
      for (uint64_t i = slices; i < ops.size(); ++i) out.done.push_back(batch);  // zero-length ops
      pump_locked(out);
    }
  }
  out.apply();
}

Result<uint32_t> LinkState::grant_rkey_locked(uint64_t fence, uint64_t addr, uint64_t len) {
  auto covering = [&]() -> uint32_t {
    auto it = grants_.find(fence);
    if (it == grants_.end()) return 0;
    for (const GrantRun& r : it->second)
      if (addr >= r.addr && len <= r.len && addr - r.addr <= r.len - len) return r.rkey;
    return 0;
  };
  if (const uint32_t rkey = covering(); rkey != 0) return rkey;
  if (fence != 0) {  // first write under this grant, or units were added to it since we asked
    const auto deadline = Clock::now() + std::max(core_->cfg.op_timeout, std::chrono::milliseconds(500));
    auto fail = [&](const Error& e) {
      return make_error(ErrorCode::transfer_failed, where() + ": grant query: " + e.detail);
    };
    if (auto st = write_all(fd_, encode_grant_query(fence), deadline); !st) return fail(st.error());
    auto runs = read_grant_reply(fd_, deadline);
    if (!runs) return fail(runs.error());
    if (!runs->empty()) {
      if (!grants_.count(fence)) grant_order_.push_back(fence);
      grants_[fence] = std::move(*runs);
      while (grant_order_.size() > 1024) {  // grants of rooms long gone
        grants_.erase(grant_order_.front());
        grant_order_.pop_front();
      }
    }
    if (const uint32_t rkey = covering(); rkey != 0) return rkey;
  }
  return make_error(ErrorCode::fenced, where() + ": no live grant of the target covers the write (revoked)");
}

void LinkState::refused_locked(uint64_t fence, const Error& err, Outcomes& out) {
  grants_.erase(fence);  // its runs are deregistered; a fresh grant comes with a fresh key
  std::vector<std::pair<uint64_t, Slice>> posted;
  for (auto& [id, p] : posted_) posted.emplace_back(id, std::move(p.slice));
  std::sort(posted.begin(), posted.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::deque<Slice> again;
  size_t failed = 1;  // the refused slice
  auto sort_out = [&](Slice&& s) {
    if (s.fence == fence) {
      out.failed.emplace_back(s.batch, err);
      ++failed;
    } else {
      again.push_back(std::move(s));
    }
  };
  for (auto& [id, s] : posted) sort_out(std::move(s));
  for (auto& s : queue_) sort_out(std::move(s));
  posted_.clear();
  queue_ = std::move(again);
  for (ibv_qp* qp : qps_) qp_to_error(qp);
  teardown_locked();
  spdlog::info(
      "{}: a write under a revoked grant was refused ({} slice(s) failed); reconnecting for {} "
      "slice(s) of other grants",
      where(), failed, queue_.size());
  if (auto st = connect_locked(); !st) {
    break_locked(st.error(), out);
    return;
  }
  pump_locked(out);
}

void LinkState::pump_locked(Outcomes& out) {
  const size_t n = qps_.size();
  while (!queue_.empty() && !broken_ && n > 0) {
    size_t qi = n;
    for (size_t k = 0; k < n; ++k) {
      size_t i = (next_qp_ + k) % n;
      if (outstanding_[i] < max_wr_) {
        qi = i;
        break;
      }
    }
    if (qi == n) return;  // every QP at its bound: completions will pump again
    next_qp_ = (qi + 1) % n;
    const Slice& s = queue_.front();
    ibv_sge sge{s.src, s.len, s.lkey};
    ibv_send_wr wr{};
    ibv_send_wr* bad = nullptr;
    wr.wr_id = core_->next_wr_id.fetch_add(1);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = s.raddr;
    wr.wr.rdma.rkey = s.rkey;
    if (int rc = ibv_post_send(qps_[qi], &wr, &bad); rc != 0) {
      break_locked(make_error(ErrorCode::transfer_failed, where() + ": ibv_post_send: " + std::strerror(rc)),
                   out);
      return;
    }
    posted_.emplace(wr.wr_id, Posted{s, qi, Clock::now()});
    ++outstanding_[qi];
    queue_.pop_front();
  }
}

void LinkState::break_locked(const Error& err, Outcomes& out) {
  for (ibv_qp* qp : qps_) qp_to_error(qp);
  BatchPtr last;  // slices of one batch are adjacent in the queue: fail each batch once
  for (auto& [id, p] : posted_) out.failed.emplace_back(p.slice.batch, err);
  for (auto& s : queue_) {
    if (s.batch != last) out.failed.emplace_back(s.batch, err);
    last = s.batch;
  }
  posted_.clear();
  queue_.clear();
  teardown_locked();
  if (!broken_ && !closed_)
    spdlog::warn("{}: broken ({}); reconnecting on next use", where(), err.to_string());
  broken_ = true;
}

void LinkState::close() {
  Outcomes out;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    break_locked(make_error(ErrorCode::session_closed, where() + " closed"), out);
  }
  out.apply();
}

bool LinkState::healthy() const {
  std::lock_guard lock(mu_);
  return !closed_ && !broken_;
}

void LinkState::on_completion(const ibv_wc& wc) {
  Outcomes out;
  {
    std::lock_guard lock(mu_);
    auto it = posted_.find(wc.wr_id);
    if (it == posted_.end()) return;  // flushed after a break, or from a QP already dropped
    Posted p = std::move(it->second);
    posted_.erase(it);
    if (p.qp < outstanding_.size()) --outstanding_[p.qp];
    if (wc.status == IBV_WC_SUCCESS) {
      out.done.push_back(std::move(p.slice.batch));
      pump_locked(out);
    } else if (wc.status == IBV_WC_REM_ACCESS_ERR && p.slice.fence != 0 && !closed_) {
      // Our own grant rkey refused: the target revoked that grant (the room was given up there).
      Error err =
          make_error(ErrorCode::fenced, where() + ": the target refused a write under a revoked grant (" +
                                            ibv_wc_status_str(wc.status) + ")");
      out.failed.emplace_back(p.slice.batch, err);
      refused_locked(p.slice.fence, err, out);
    } else {
      Error err = map_wc_status(wc.status, closed_, where());
      out.failed.emplace_back(p.slice.batch, err);
      break_locked(err, out);
    }
  }
  out.apply();
}

void LinkState::check(Clock::time_point now) {
  Outcomes out;
  {
    std::unique_lock lock(mu_, std::try_to_lock);
    if (!lock || closed_ || broken_ || qps_.empty()) return;  // busy (e.g. reconnecting): next round
    if (fd_ >= 0 && peer_gone(fd_)) {
      break_locked(make_error(ErrorCode::peer_died, where() + ": side channel closed (peer process gone)"),
                   out);
    } else if (!posted_.empty()) {
      auto oldest = std::min_element(posted_.begin(), posted_.end(), [](const auto& a, const auto& b) {
                      return a.second.at < b.second.at;
                    })->second.at;
      if (now - oldest > core_->cfg.op_timeout) {
        break_locked(
            make_error(ErrorCode::timeout, where() + ": no completion within " +
                                               std::to_string(core_->cfg.op_timeout.count()) + " ms"),
            out);
      }
    }
  }
  out.apply();
}

}  // namespace epd::transport::rdma

#include "device.hpp"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace epd::transport::rdma {

bool is_ipv4_mapped(const Gid& g) {
  for (int i = 0; i < 10; ++i)
    if (g[i] != 0) return false;
  return g[10] == 0xff && g[11] == 0xff;
}

int gid_score(const GidCandidate& c, std::optional<std::array<uint8_t, 4>> want_ipv4) {
  if (std::all_of(c.gid.begin(), c.gid.end(), [](uint8_t b) { return b == 0; })) return -1;
  switch (c.type) {
    case IBV_GID_TYPE_ROCE_V2:
      if (is_ipv4_mapped(c.gid)) {
        if (want_ipv4 && std::equal(want_ipv4->begin(), want_ipv4->end(), c.gid.begin() + 12)) return 5;
        return 4;
      }
      return 3;
    case IBV_GID_TYPE_IB:
      return 2;
    case IBV_GID_TYPE_ROCE_V1:
      return 1;  // not routable across subnets; last resort
  }
  return -1;
}

int choose_gid(std::span<const GidCandidate> cands, std::optional<std::array<uint8_t, 4>> want_ipv4) {
  int best = -1, best_score = -1;
  for (size_t i = 0; i < cands.size(); ++i) {
    int s = gid_score(cands[i], want_ipv4);
    if (s > best_score) best = int(i), best_score = s;  // first of equal scores wins: lowest index
  }
  return best;
}

std::string gid_to_string(const Gid& gid) {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(AF_INET6, gid.data(), buf, sizeof buf);
  return buf;
}

namespace {

struct Pick {
  ibv_device* dev = nullptr;
  GidCandidate gid;
  int score = -1;
  ibv_port_attr port{};
};

std::optional<std::array<uint8_t, 4>> ipv4_of(const std::string& host) {
  std::array<uint8_t, 4> a{};
  if (inet_pton(AF_INET, host.c_str(), a.data()) != 1) return std::nullopt;
  if (a == std::array<uint8_t, 4>{}) return std::nullopt;  // 0.0.0.0 names no interface
  return a;
}

// The best GID of `dev`'s port per `cfg`, or a reason why there is none.
Result<Pick> inspect(ibv_device* dev, const RdmaConfig& cfg) {
  const std::string name = ibv_get_device_name(dev);
  ibv_context* ctx = ibv_open_device(dev);
  if (!ctx)
    return make_error(ErrorCode::config_error, name + ": ibv_open_device failed: " + std::strerror(errno));
  Pick p;
  p.dev = dev;
  std::string why;
  if (ibv_query_port(ctx, cfg.port, &p.port) != 0) {
    why = "port " + std::to_string(cfg.port) + " not found";
  } else if (p.port.state != IBV_PORT_ACTIVE) {
    why = "port " + std::to_string(cfg.port) + " not active";
  } else {
    std::vector<GidCandidate> cands;
    for (int i = 0; i < p.port.gid_tbl_len; ++i) {
      if (cfg.gid_index >= 0 && i != cfg.gid_index) continue;
      ibv_gid_entry e{};
      if (ibv_query_gid_ex(ctx, cfg.port, i, &e, 0) != 0) continue;  // empty slot
      GidCandidate c{i, ibv_gid_type(e.gid_type), {}};
      std::memcpy(c.gid.data(), e.gid.raw, 16);
      cands.push_back(c);
    }
    int best = choose_gid(cands, ipv4_of(cfg.handshake_host));
    if (best < 0) {
      why = cfg.gid_index >= 0 ? "gid index " + std::to_string(cfg.gid_index) + " is empty" : "no usable GID";
    } else {
      p.gid = cands[size_t(best)];
      p.score = gid_score(p.gid, ipv4_of(cfg.handshake_host));
    }
  }
  ibv_close_device(ctx);
  if (p.score < 0) return make_error(ErrorCode::config_error, name + ": " + why);
  return p;
}

}  // namespace

Result<std::shared_ptr<Device>> Device::open(const RdmaConfig& cfg) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n == 0) {  // NULL (errno ENOSYS) when the kernel has no RDMA support at all
    std::string why = errno ? std::strerror(errno) : "empty list";
    if (list) ibv_free_device_list(list);
    return make_error(ErrorCode::config_error, "no RDMA devices (ibv_get_device_list: " + why + ")");
  }
  Pick best;
  std::string reasons;
  bool named_found = false;
  for (int i = 0; i < n; ++i) {
    if (!cfg.device.empty() && cfg.device != ibv_get_device_name(list[i])) continue;
    named_found = true;
    auto p = inspect(list[i], cfg);
    if (!p) {
      reasons += (reasons.empty() ? "" : "; ") + p.error().detail;
      continue;
    }
    if (p->score > best.score) best = *p;
  }
  if (!cfg.device.empty() && !named_found) {
    ibv_free_device_list(list);
    return make_error(ErrorCode::config_error, "RDMA device '" + cfg.device + "' not found");
  }
  if (!best.dev) {
    ibv_free_device_list(list);
    return make_error(ErrorCode::config_error, "no usable RDMA device: " + reasons);
  }

  std::shared_ptr<Device> d(new Device());
  d->name_ = ibv_get_device_name(best.dev);
  d->ctx_ = ibv_open_device(best.dev);
  ibv_free_device_list(list);
  auto fail = [&](const char* what) {
    return make_error(ErrorCode::config_error, d->name_ + ": " + what + ": " + std::strerror(errno));
  };
  if (!d->ctx_) return fail("ibv_open_device");
  d->port_ = cfg.port;
  d->gid_index_ = best.gid.index;
  d->gid_ = best.gid.gid;
  d->lid_ = best.port.lid;
  d->mtu_ = best.port.active_mtu;
  ibv_device_attr attr{};
  if (ibv_query_device(d->ctx_, &attr) != 0) return fail("ibv_query_device");
  d->max_qp_wr_ = uint32_t(attr.max_qp_wr);
  if (!(d->pd_ = ibv_alloc_pd(d->ctx_))) return fail("ibv_alloc_pd");
  if (!(d->channel_ = ibv_create_comp_channel(d->ctx_))) return fail("ibv_create_comp_channel");
  const int cqe = std::min(attr.max_cqe, 65536);
  if (!(d->cq_ = ibv_create_cq(d->ctx_, cqe, nullptr, d->channel_, 0))) return fail("ibv_create_cq");
  d->cq_capacity_ = d->cq_->cqe;
  if (ibv_req_notify_cq(d->cq_, 0) != 0) return fail("ibv_req_notify_cq");
  return d;
}

Device::~Device() {
  for (ibv_mr* mr : mrs_) ibv_dereg_mr(mr);
  if (cq_) ibv_destroy_cq(cq_);
  if (channel_) ibv_destroy_comp_channel(channel_);
  if (pd_) ibv_dealloc_pd(pd_);
  if (ctx_) ibv_close_device(ctx_);
}

Result<ibv_mr*> Device::register_memory(void* base, uint64_t len, bool remote) {
  ibv_mr* mr = ibv_reg_mr(pd_, base, len, IBV_ACCESS_LOCAL_WRITE | (remote ? IBV_ACCESS_REMOTE_WRITE : 0));
  if (!mr) {
    return make_error(ErrorCode::io_error, "ibv_reg_mr(" + std::to_string(len) + " bytes) on " + name_ +
                                               ": " + std::strerror(errno));
  }
  std::lock_guard lock(mu_);
  mrs_.push_back(mr);
  if (remote) remote_mrs_.push_back(mr);
  return mr;
}

Result<ibv_mr*> Device::register_grant(void* base, uint64_t len) {
  // Remote write needs local write too (verbs rule).
  ibv_mr* mr = ibv_reg_mr(pd_, base, len, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!mr) {
    return make_error(ErrorCode::io_error, "ibv_reg_mr(" + std::to_string(len) + " bytes, grant) on " +
                                               name_ + ": " + std::strerror(errno));
  }
  return mr;
}

uint32_t Device::rkey_for(uint64_t addr, uint64_t len) const {
  std::lock_guard lock(mu_);
  for (ibv_mr* mr : remote_mrs_) {
    const uint64_t b = reinterpret_cast<uint64_t>(mr->addr);
    if (addr >= b && len <= mr->length && addr - b <= mr->length - len) return mr->rkey;
  }
  return 0;
}

}  // namespace epd::transport::rdma

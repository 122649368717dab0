#pragma once
// Device, port and GID selection, and the per-engine verbs resources shared by every link: context, PD,
// one send CQ with its completion channel, and the memory registrations.
#include <infiniband/verbs.h>

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "epd/transport/types.hpp"
#include "rdma_options.hpp"

namespace epd::transport::rdma {

using Gid = std::array<uint8_t, 16>;

// One usable GID table entry of a port.
struct GidCandidate {
  int index = 0;
  ibv_gid_type type = IBV_GID_TYPE_IB;
  Gid gid{};
};

bool is_ipv4_mapped(const Gid& gid);
// Ranks a GID for routability (higher is better, < 0 unusable): RoCE v2 IPv4-mapped carrying `want_ipv4`
// (the configured interface's address) > any RoCE v2 IPv4-mapped > other RoCE v2 > IB > RoCE v1.
int gid_score(const GidCandidate& c, std::optional<std::array<uint8_t, 4>> want_ipv4);
// Index of the best candidate in `cands`, or -1.
int choose_gid(std::span<const GidCandidate> cands, std::optional<std::array<uint8_t, 4>> want_ipv4);
std::string gid_to_string(const Gid& gid);

// The opened device; shared (shared_ptr) by the backend and its links so it outlives them all.
class Device {
 public:
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  // Picks and opens a device per `cfg`. Error config_error with a one-line reason when no device is usable
  // (e.g. "no RDMA devices"), so the engine can drop the backend with that line.
  static Result<std::shared_ptr<Device>> open(const RdmaConfig& cfg);

  // Registers [base, base+len) for local write, and remote write when `remote`; the MR lives as long as
  // the device. A fenced region is registered local-only: peers reach it only through grant registrations.
  Result<ibv_mr*> register_memory(void* base, uint64_t len, bool remote = true);
  // rkey of the remote-writable registration containing [addr, addr+len), 0 if none.
  uint32_t rkey_for(uint64_t addr, uint64_t len) const;
  // A registration for one grant (remote write into [base, base+len)), owned by the caller: deregistering
  // it is what cuts a stale writer off. May overlap the region's own registration.
  Result<ibv_mr*> register_grant(void* base, uint64_t len);

  ibv_context* ctx() const { return ctx_; }
  ibv_pd* pd() const { return pd_; }
  ibv_cq* cq() const { return cq_; }
  ibv_comp_channel* channel() const { return channel_; }
  int cq_capacity() const { return cq_capacity_; }
  uint32_t max_qp_wr() const { return max_qp_wr_; }
  const std::string& name() const { return name_; }
  uint8_t port() const { return port_; }
  int gid_index() const { return gid_index_; }
  const Gid& gid() const { return gid_; }
  uint16_t lid() const { return lid_; }
  ibv_mtu active_mtu() const { return mtu_; }

 private:
  Device() = default;

  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_ = nullptr;
  int cq_capacity_ = 0;
  uint32_t max_qp_wr_ = 0;
  std::string name_;
  uint8_t port_ = 1;
  int gid_index_ = 0;
  Gid gid_{};
  uint16_t lid_ = 0;
  ibv_mtu mtu_ = IBV_MTU_1024;
  mutable std::mutex mu_;
  std::vector<ibv_mr*> mrs_;         // the regions' registrations
  std::vector<ibv_mr*> remote_mrs_;  // those of mrs_ peers may write
};

}  // namespace epd::transport::rdma

#pragma once
// One rdma connection to a peer: `qps_per_peer` RC requester QPs whose responders the peer created for us
// during the handshake. Writes are cut into slices, each one signalled RDMA WRITE; at most
// `max_outstanding_wr` per QP are posted, the rest wait in a queue that completions drain. A batch is done
// when every slice has completed (an RC WRITE completion means the bytes are placed at the responder).
// A fenced region publishes no rkey: a write into it under a grant (WriteOp::fence) uses the rkeys of that
// grant's own registrations, asked for once on the side channel (handshake.hpp, grant query).
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "device.hpp"
#include "epd/protocol/segment.hpp"
#include "epd/transport/backend.hpp"
#include "handshake.hpp"
#include "rdma_info.hpp"

namespace epd::transport::rdma {

class LinkState;

// What the backend and its links share; outlives both.
struct Core {
  std::shared_ptr<Device> dev;
  RdmaConfig cfg;
  std::atomic<uint64_t> next_wr_id{1};  // unique per engine, so a late completion of a dropped QP is ignored
  std::mutex mu;
  std::unordered_map<uint32_t, std::weak_ptr<LinkState>> by_qpn;  // routes completions to links
  std::vector<std::weak_ptr<LinkState>> links;                    // for the watchdog
  int reserved_cqe = 0;                                           // sum of qps * max_outstanding_wr
};

class LinkState : public std::enable_shared_from_this<LinkState> {
 public:
  LinkState(std::shared_ptr<Core> core, protocol::SegmentDescriptor peer);
  ~LinkState();

  // Handshake + QP setup (used at connect and to reconnect a broken link on the next submit).
  Status connect();
  void submit(const BatchPtr& batch, std::span<const ResolvedOp> ops);
  void close();
  bool healthy() const;

  // --- completion thread ---
  void on_completion(const ibv_wc& wc);
  // Fails the link when a posted WR waited longer than op_timeout or the peer closed the side channel.
  void check(Clock::time_point now);

 private:
  struct Slice {
    BatchPtr batch;
    uint64_t src = 0;
    uint32_t len = 0;
    uint32_t lkey = 0;
    uint64_t raddr = 0;
    uint32_t rkey = 0;
    uint64_t fence = 0;  // the grant whose rkey this is; 0: the region's own rkey
  };
  struct Posted {
    Slice slice;
    size_t qp = 0;
    Clock::time_point at;
  };
  // Batch outcomes applied after mu_ is released (a callback may submit again on this link).
  struct Outcomes {
    std::vector<BatchPtr> done;
    std::vector<std::pair<BatchPtr, Error>> failed;
    void apply();
  };

  Status connect_locked();
  void pump_locked(Outcomes& out);
  // Fails every queued and posted slice's batch with `err` and drops the QPs; next submit reconnects.
  void break_locked(const Error& err, Outcomes& out);
  void teardown_locked();
  std::string where() const;
  uint32_t rkey_of(const protocol::RegionDesc& region) const;
  // The rkey of `fence`'s registration holding [addr, addr+len), asked for on the side channel when not
  // known yet. Error fenced: no live grant covers it; another error: the side channel failed.
  Result<uint32_t> grant_rkey_locked(uint64_t fence, uint64_t addr, uint64_t len);
  // The target's device refused a write under `fence` (its grant was revoked): that QP is in error. Fails
  // the grant's slices with `err`, re-posts every other slice on fresh QPs (a WRITE may be repeated).
  void refused_locked(uint64_t fence, const Error& err, Outcomes& out);

  const std::shared_ptr<Core> core_;
  const protocol::SegmentDescriptor peer_;
  const std::optional<RdmaInfo> info_;            // the peer's rdma blob
  std::unordered_map<uint32_t, uint32_t> rkeys_;  // the peer's region id -> rkey (0: not registered)
  mutable std::mutex mu_;
  std::vector<ibv_qp*> qps_;
  std::vector<uint32_t> outstanding_;  // posted, not yet completed, per QP
  size_t next_qp_ = 0;
  std::deque<Slice> queue_;
  std::unordered_map<uint64_t, Posted> posted_;
  std::unordered_map<uint64_t, std::vector<GrantRun>> grants_;  // fence key -> the target's runs for it
  std::deque<uint64_t> grant_order_;                            // oldest first, to bound grants_
  int fd_ = -1;  // handshake connection, kept open: its EOF means the peer is gone
  int reserved_ = 0;
  bool broken_ = false;
  bool closed_ = false;
  uint32_t max_wr_ = 0;
};

// The Link handed to the engine: a handle on the shared state.
class RdmaLink final : public Link {
 public:
  explicit RdmaLink(std::shared_ptr<LinkState> state) : state_(std::move(state)) {}
  ~RdmaLink() override { state_->close(); }
  void submit(const BatchPtr& batch, std::span<const ResolvedOp> ops) override { state_->submit(batch, ops); }
  void close() override { state_->close(); }
  bool healthy() const override { return state_->healthy(); }

 private:
  std::shared_ptr<LinkState> state_;
};

}  // namespace epd::transport::rdma

#pragma once
// A writer's view of one same-host peer: the peer's regions mapped into this process. A write is one memcpy;
// the batch completes inline in submit() because the bytes are in the target's memory when memcpy returns.
#include <atomic>
#include <cstdint>
#include <vector>

#include "control_page.hpp"
#include "epd/transport/backend.hpp"

namespace epd::transport::shm {

class ShmLink final : public Link {
 public:
  // Opens the peer's control page and regions through /proc/<pid>/fd/<fd>; checks the token first.
  static Result<std::unique_ptr<Link>> open(const protocol::SegmentDescriptor& peer);
  ~ShmLink() override;

  void submit(const BatchPtr& batch, std::span<const ResolvedOp> ops) override;
  void close() override;
  bool healthy() const override { return healthy_.load(std::memory_order_acquire); }

 private:
  struct Mapping {
    uint64_t remote_base = 0;
    uint64_t length = 0;
    uint8_t* local = nullptr;
  };
  ShmLink() = default;
  // Detects a dead or stopped target: the control token (cheap, every batch) and the pidfd (rate limited).
  Status check_peer();

  uint64_t token_ = 0;
  const ControlPage* control_ = nullptr;
  int pidfd_ = -1;
  std::vector<Mapping> by_id_;  // indexed by RegionDesc::id
  std::atomic<bool> healthy_{true};
  std::atomic<bool> closed_{false};
  std::atomic<int64_t> next_liveness_check_ns_{0};
};

}  // namespace epd::transport::shm

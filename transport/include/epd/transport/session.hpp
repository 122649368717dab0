#pragma once
// My engine opened on one peer's descriptor. submit() validates every op (local range inside one of my
// regions, remote range inside one of the peer's regions, overflow-safe) before any byte moves, then hands
// the batch to the backend's link. Thread-safe.
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "epd/protocol/segment.hpp"
#include "epd/transport/backend.hpp"
#include "epd/transport/batch.hpp"

namespace epd::transport {

class Engine;

struct SessionStats {
  uint64_t batches_submitted = 0;
  uint64_t batches_ok = 0;
  uint64_t batches_failed = 0;
  uint64_t bytes_ok = 0;
};

class Session {
 public:
  // `batch_ids` belongs to the engine; a session must not be used after its engine is destroyed (the engine
  // closes its sessions on destruction, after which submit() only returns session_closed).
  Session(const Engine& engine, protocol::SegmentDescriptor peer, std::string backend,
          std::unique_ptr<Link> link, std::atomic<uint64_t>& batch_ids);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Validation errors (out_of_range, local_out_of_range, session_closed) come back here and move nothing;
  // transfer errors come back through the batch. Zero-length ops are validated, then skipped. May throw
  // std::runtime_error only when a fault backend is configured to (throw_after_ops).
  Result<BatchPtr> submit(std::span<const WriteOp> ops);
  Result<BatchPtr> submit(const std::vector<WriteOp>& ops) { return submit(std::span<const WriteOp>(ops)); }
  // Fails outstanding batches with session_closed. Idempotent; also done by the destructor.
  void close();

  const std::string& backend() const { return backend_; }
  const protocol::SegmentDescriptor& peer() const { return peer_; }
  bool healthy() const;
  SessionStats stats() const;

 private:
  const Engine& engine_;
  const protocol::SegmentDescriptor peer_;
  const std::string backend_;
  std::unique_ptr<Link> link_;
  std::atomic<uint64_t>& batch_ids_;
  std::atomic<bool> closed_{false};
  std::shared_ptr<BatchCounters> counters_;
};

using SessionPtr = std::shared_ptr<Session>;

}  // namespace epd::transport

#include "epd/transport/session.hpp"

#include <fmt/format.h>

#include <string>

#include "epd/transport/engine.hpp"

namespace epd::transport {
namespace {

// Overflow-safe: [addr, addr+len) inside [base, base+length).
bool inside(uint64_t base, uint64_t length, uint64_t addr, uint64_t len) {
  return addr >= base && len <= length && addr - base <= length - len;
}

std::string range_text(uint64_t addr, uint64_t len) {
  return fmt::format("[{:#x}, +{})", addr, len);
}

}  // namespace

Session::Session(const Engine& engine, protocol::SegmentDescriptor peer, std::string backend,
                 std::unique_ptr<Link> link, std::atomic<uint64_t>& batch_ids)
    : engine_(engine),
      peer_(std::move(peer)),
      backend_(std::move(backend)),
      link_(std::move(link)),
      batch_ids_(batch_ids),
      counters_(std::make_shared<BatchCounters>()) {}

Session::~Session() {
  close();
}

Result<BatchPtr> Session::submit(std::span<const WriteOp> ops) {
  if (closed_.load(std::memory_order_acquire))
    return make_error(ErrorCode::session_closed, "session is closed");
  // Reused per thread so validation allocates nothing once warm; a submit from inside a completion callback
  // (re-entrant on this thread) gets its own vector. Backends must not keep the span.
  thread_local std::vector<ResolvedOp> scratch;
  thread_local bool scratch_busy = false;
  std::vector<ResolvedOp> nested;
  std::vector<ResolvedOp>& resolved = scratch_busy ? nested : scratch;
  struct Claim {
    bool& busy;
    const bool was;
    ~Claim() { busy = was; }
  } claim{scratch_busy, scratch_busy};
  scratch_busy = true;
  resolved.clear();
  uint64_t bytes = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const WriteOp& op = ops[i];
    // The remote range first: it is the one that protects someone else's memory.
    const protocol::RegionDesc* remote = nullptr;
    for (const auto& r : peer_.regions) {
      if (inside(r.base, r.length, op.remote_addr, op.len)) {
        remote = &r;
        break;
      }
    }
    if (!remote)
      return make_error(ErrorCode::out_of_range, "op " + std::to_string(i) + ": remote " +
                                                     range_text(op.remote_addr, op.len) +
                                                     " is not inside one region of " + peer_.instance_id);
    const Region* local = engine_.find_local(op.local_addr, op.len);
    if (!local)
      return make_error(ErrorCode::local_out_of_range, "op " + std::to_string(i) + ": local " +
                                                           range_text(op.local_addr, op.len) +
                                                           " is not inside one of my regions");
    if (op.len == 0) continue;
    bytes += op.len;
    resolved.push_back(ResolvedOp{reinterpret_cast<const uint8_t*>(op.local_addr), op.len, op.remote_addr,
                                  local, remote, op.fence});
  }
  auto batch = std::make_shared<Batch>(batch_ids_.fetch_add(1, std::memory_order_relaxed), resolved.size(),
                                       bytes, counters_);
  if (!resolved.empty()) link_->submit(batch, resolved);
  return batch;
}

void Session::close() {
  if (closed_.exchange(true, std::memory_order_acq_rel)) return;
  link_->close();
}

bool Session::healthy() const {
  return !closed_.load(std::memory_order_acquire) && link_->healthy();
}

SessionStats Session::stats() const {
  return {counters_->submitted.load(), counters_->ok.load(), counters_->failed.load(),
          counters_->bytes_ok.load()};
}

}  // namespace epd::transport

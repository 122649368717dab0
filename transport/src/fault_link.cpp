// The fault link (an engine feature): wraps a backend's link and injects errors, delays and a thrown "worker
// crash", driven by a seed so every run of a test sees the same faults.
#include <fmt/format.h>

#include <memory>
#include <stdexcept>

#include "delay_queue.hpp"
#include "epd/transport/fault.hpp"
#include "fault_counters.hpp"
#include "fault_link.hpp"

namespace epd::transport {

uint64_t fault_session_seed(uint64_t seed, uint64_t session_index) {
  if (session_index == 0) return seed;
  uint64_t z = seed ^ (0xd1b54a32d192ed03ull * session_index);
  z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
  return z ^ (z >> 33);
}

bool fault_injects(uint64_t seed, uint64_t op_index, double error_rate) {
  if (error_rate <= 0.0) return false;
  if (error_rate >= 1.0) return true;
  // splitmix64 of (seed, index): independent, well mixed draws without shared PRNG state.
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (op_index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<double>(z >> 11) * 0x1.0p-53 < error_rate;
}

namespace fault {
namespace {

class FaultLink final : public Link {
 public:
  FaultLink(std::unique_ptr<Link> inner, const FaultConfig& config, std::shared_ptr<FaultCounters> counters)
      : inner_(std::move(inner)), config_(config), counters_(std::move(counters)) {
    // Each session draws from its own stream, so a fresh session (a retry, a restarted worker) does not
    // replay the faults of the one before it.
    seed_ = fault_session_seed(config_.seed, counters_->links.fetch_add(1));
    if (config_.delay_us > 0) delays_ = DelayQueue::start(std::chrono::microseconds(config_.delay_us));
    if (config_.stall_us > 0) stalls_ = DelayQueue::start(std::chrono::microseconds(config_.stall_us));
  }
  ~FaultLink() override { close(); }

  void submit(const BatchPtr& batch, std::span<const ResolvedOp> ops) override {
    const uint64_t n = ops.size();
    const uint64_t first = next_op_.fetch_add(n);  // ops are numbered 0, 1, ... per link
    counters_->ops.fetch_add(n);
    // "Throw after N ops": the batch holding op number N (1-based) and every later one throws, as a
    // crashed worker would; nothing of that batch moves.
    if (config_.throw_after_ops > 0 && first + n >= config_.throw_after_ops && claim_throw()) {
      crashed_.store(true);
      throw std::runtime_error(fmt::format("fault backend: injected worker crash (throw_after_ops={}, op {})",
                                           config_.throw_after_ops, first + n));
    }
    uint64_t failing = 0, first_failing = 0;
    for (uint64_t i = 0; i < n; ++i) {
      if (fault_injects(seed_, first + i, config_.error_rate)) {
        if (failing++ == 0) first_failing = first + i;
      }
    }
    if (failing > 0) {
      counters_->injected_errors.fetch_add(failing);
      Error e = make_error(ErrorCode::injected_fault,
                           fmt::format("fault backend: injected error on op {}", first_failing));
      if (!delays_) return batch->fail(std::move(e));
      counters_->delayed.fetch_add(1);
      return delays_->post([batch, e](bool) mutable { batch->fail(std::move(e)); });
    }
    if (stalls_) {
      // The bytes move stall_us later, whatever happened to the room meanwhile (a frozen writer).
      counters_->delayed.fetch_add(1);
      return stalls_->post(
          [this, batch, held = std::vector<ResolvedOp>(ops.begin(), ops.end())](bool cancelled) {
            if (cancelled)
              return batch->fail(make_error(ErrorCode::session_closed, "closed while a stall was pending"));
            submit_now(batch, held);
          });
    }
    submit_now(batch, ops);
  }

  void submit_now(const BatchPtr& batch, std::span<const ResolvedOp> ops) {
    const uint64_t n = ops.size();
    if (!delays_) return inner_->submit(batch, ops);
    // The inner link completes a proxy; the real batch completes delay_us later on the timer thread.
    auto proxy = std::make_shared<Batch>(batch->id(), n, batch->bytes());
    proxy->on_complete([batch, n, delays = delays_, counters = counters_](const Status& st) {
      counters->delayed.fetch_add(1);
      delays->post([batch, n, st](bool cancelled) {
        if (cancelled)
          batch->fail(make_error(ErrorCode::session_closed, "closed while a fault delay was pending"));
        else if (st)
          batch->part_done(n);
        else
          batch->fail(st.error());
      });
    });
    inner_->submit(proxy, ops);
  }

  void close() override {
    if (stalls_) stalls_->stop();  // fails what is still held, before the inner link goes
    inner_->close();
    if (delays_) delays_->stop();
  }
  bool healthy() const override { return !crashed_.load() && inner_->healthy(); }

 private:
  // One of the engine's throw_max throws (every throw when there is no limit).
  bool claim_throw() {
    uint64_t thrown = counters_->thrown.load();
    do {
      if (config_.throw_max > 0 && thrown >= config_.throw_max) return false;
    } while (!counters_->thrown.compare_exchange_weak(thrown, thrown + 1));
    return true;
  }

  std::unique_ptr<Link> inner_;
  const FaultConfig config_;
  std::shared_ptr<FaultCounters> counters_;
  std::shared_ptr<DelayQueue> delays_;
  std::shared_ptr<DelayQueue> stalls_;
  uint64_t seed_ = 0;
  std::atomic<uint64_t> next_op_{0};
  std::atomic<bool> crashed_{false};
};

}  // namespace
}  // namespace fault

std::unique_ptr<Link> make_fault_link(std::unique_ptr<Link> inner, const FaultConfig& config,
                                      std::shared_ptr<FaultCounters> counters) {
  return std::make_unique<fault::FaultLink>(std::move(inner), config, std::move(counters));
}

}  // namespace epd::transport

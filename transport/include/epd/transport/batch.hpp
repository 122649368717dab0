#pragma once
// Completion of one submitted batch of writes. A batch is done only when every byte is in the target's
// memory (receiver-applied). Thread-safe: backends complete it from their threads; callers poll, wait or
// register one callback.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "epd/transport/types.hpp"

namespace epd::transport {

// Per-session totals a batch adds itself to when it finishes (so the session needs no callback slot).
struct BatchCounters {
  std::atomic<uint64_t> submitted{0};
  std::atomic<uint64_t> ok{0};
  std::atomic<uint64_t> failed{0};
  std::atomic<uint64_t> bytes_ok{0};
};

class Batch {
 public:
  enum class State : uint8_t { pending, done, failed };
  using Callback = std::function<void(const Status&)>;

  // `parts`: how many completions (ops or slices) the backend will report before the batch is done.
  // `parts` == 0 means nothing to move: the batch is done at once.
  Batch(uint64_t id, uint64_t parts, uint64_t bytes, std::shared_ptr<BatchCounters> counters = nullptr);

  uint64_t id() const { return id_; }
  uint64_t bytes() const { return bytes_; }
  State poll() const { return state_.load(std::memory_order_acquire); }
  bool finished() const { return poll() != State::pending; }
  // Blocks until finished or the timeout passes; returns finished().
  bool wait(std::chrono::milliseconds timeout) const;
  // The final status; only meaningful once finished().
  Status status() const;
  // Called exactly once with the final status: now (in this thread) if already finished, else from the
  // completing backend thread. Keep it short; typical use posts a message to an actor.
  void on_complete(Callback cb);

  // --- for backends ---
  // Adds parts that will be reported later (a backend that slices ops further).
  void add_parts(uint64_t n);
  // Reports n parts done; the last one completes the batch successfully (unless it already failed).
  void part_done(uint64_t n = 1);
  // Fails the batch (first error wins); later part_done calls are ignored.
  void fail(Error error);

 private:
  void finish(State s, Error error);

  const uint64_t id_;
  const uint64_t bytes_;
  const std::shared_ptr<BatchCounters> counters_;
  std::atomic<uint64_t> remaining_;
  std::atomic<State> state_{State::pending};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  Error error_;
  Callback callback_;
};

using BatchPtr = std::shared_ptr<Batch>;

}  // namespace epd::transport

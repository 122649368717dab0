#include "epd/transport/batch.hpp"

#include <utility>

namespace epd::transport {

Batch::Batch(uint64_t id, uint64_t parts, uint64_t bytes, std::shared_ptr<BatchCounters> counters)
    : id_(id), bytes_(bytes), counters_(std::move(counters)), remaining_(parts) {
  if (counters_) counters_->submitted.fetch_add(1, std::memory_order_relaxed);
  if (parts == 0) finish(State::done, Error{ErrorCode::ok, false, {}});
}

bool Batch::wait(std::chrono::milliseconds timeout) const {
  if (finished()) return true;
  std::unique_lock lock(mu_);
  return cv_.wait_for(lock, timeout, [this] { return finished(); });
}

Status Batch::status() const {
  if (poll() != State::failed) return {};
  std::lock_guard lock(mu_);
  return error_;
}

void Batch::on_complete(Callback cb) {
  {
    std::lock_guard lock(mu_);
    if (!finished()) {
      callback_ = std::move(cb);
      return;
    }
  }
  cb(status());
}

void Batch::add_parts(uint64_t n) {
  remaining_.fetch_add(n, std::memory_order_relaxed);
}

void Batch::part_done(uint64_t n) {
  // The part that brings the count to zero completes the batch; a failed batch ignores the rest.
  if (remaining_.fetch_sub(n, std::memory_order_acq_rel) == n)
    finish(State::done, Error{ErrorCode::ok, false, {}});
}

void Batch::fail(Error error) {
  finish(State::failed, std::move(error));
}

void Batch::finish(State s, Error error) {
  Callback cb;
  {
    std::lock_guard lock(mu_);
    if (state_.load(std::memory_order_relaxed) != State::pending) return;  // first outcome wins
    error_ = std::move(error);
    state_.store(s, std::memory_order_release);
    cb = std::move(callback_);
  }
  cv_.notify_all();
  if (counters_) {
    if (s == State::done) {
      counters_->ok.fetch_add(1, std::memory_order_relaxed);
      counters_->bytes_ok.fetch_add(bytes_, std::memory_order_relaxed);
    } else {
      counters_->failed.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (cb) cb(s == State::done ? Status{} : Status{error_});
}

}  // namespace epd::transport

#include "kernels/thread_pool.hpp"

#include <immintrin.h>

namespace epd::model {
namespace {

// Pause instructions a thread spins for before it sleeps: about 100 µs on current x86 cores.
constexpr unsigned kSpin = 1u << 12;

template <class Ready>
bool spin_until(Ready ready) {
  for (unsigned i = 0; i < kSpin; ++i) {
    if (ready()) return true;
    _mm_pause();
  }
  return ready();
}

}  // namespace

ThreadPool::ThreadPool(unsigned threads) : threads_(threads == 0 ? 1 : threads) {
  for (unsigned t = 1; t < threads_; ++t) workers_.emplace_back([this, t] { worker(t); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard lk(m_);
    stop_ = true;
  }
  go_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run(size_t n, const std::function<void(size_t, size_t, unsigned)>& fn) {
  if (threads_ == 1 || n < 2) {
    fn(0, n, 0);
    return;
  }
  const Job job = [&](unsigned t) { fn(n * t / threads_, n * (t + 1) / threads_, t); };
  dispatch(job);
}

void ThreadPool::run_chunks(size_t chunks, const std::function<void(size_t, unsigned)>& fn) {
  if (threads_ == 1 || chunks < 2) {
    for (size_t c = 0; c < chunks; ++c) fn(c, 0);
    return;
  }
  next_chunk_.store(0, std::memory_order_relaxed);
  const Job job = [&](unsigned t) {
    for (size_t c; (c = next_chunk_.fetch_add(1, std::memory_order_relaxed)) < chunks;) fn(c, t);
  };
  dispatch(job);
}

void ThreadPool::dispatch(const Job& job) {
  job_ = &job;
  pending_.store(threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);  // publishes job_ and pending_
  {
    std::lock_guard lk(m_);
    if (sleepers_) go_.notify_all();
  }
  job(0);
  if (!spin_until([this] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock lk(m_);
    caller_waiting_ = true;
    done_.wait(lk, [this] { return pending_.load(std::memory_order_acquire) == 0; });
    caller_waiting_ = false;
  }
  job_ = nullptr;
}

void ThreadPool::worker(unsigned t) {
  uint64_t seen = 0;
  for (;;) {
    const auto fresh = [&] { return generation_.load(std::memory_order_acquire) != seen || stop_; };
    if (!spin_until(fresh)) {
      std::unique_lock lk(m_);
      ++sleepers_;
      go_.wait(lk, fresh);
      --sleepers_;
    }
    if (stop_) return;
    seen = generation_.load(std::memory_order_acquire);
    (*job_)(t);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard lk(m_);
      if (caller_waiting_) done_.notify_one();
    }
  }
}

}  // namespace epd::model

#include "kernels/thread_pool.hpp"

#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>

namespace epd::model {
namespace {

// Pause instructions a thread spins for before it sleeps: about 100 µs on current x86 cores.
constexpr unsigned kSpin = 1u << 12;

template <class Ready>
bool spin_until(Ready ready, unsigned spins = kSpin) {
  for (unsigned i = 0; i < spins; ++i) {
    if (ready()) return true;
    _mm_pause();
  }
  return ready();
}

// job_word_: tag (20 bits) | chunks (22 bits) | next chunk (22 bits). A job has at most 2^22 - 1 chunks
// (run_chunks splits larger counts); the tag tells a job from the one before it.
constexpr int kChunkBits = 22;
constexpr uint64_t kChunkMask = (uint64_t{1} << kChunkBits) - 1;
constexpr size_t kMaxChunks = kChunkMask;
uint64_t tag_of(uint64_t w) {
  return w >> (2 * kChunkBits);
}
uint64_t chunks_of(uint64_t w) {
  return (w >> kChunkBits) & kChunkMask;
}
uint64_t next_of(uint64_t w) {
  return w & kChunkMask;
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
  const size_t parts = std::min<size_t>(n, size_t{4} * threads_);
  const Chunk chunk = [&](size_t p, unsigned t) { fn(n * p / parts, n * (p + 1) / parts, t); };
  dispatch(parts, chunk);
}

void ThreadPool::run_chunks(size_t chunks, const std::function<void(size_t, unsigned)>& fn) {
  if (threads_ == 1 || chunks < 2) {
    for (size_t c = 0; c < chunks; ++c) fn(c, 0);
    return;
  }
  for (size_t first = 0; first < chunks; first += kMaxChunks) {
    const size_t count = std::min(kMaxChunks, chunks - first);
    const Chunk chunk = [&](size_t c, unsigned t) { fn(first + c, t); };
    dispatch(count, chunk);
  }
}

void ThreadPool::dispatch(size_t chunks, const Chunk& chunk) {
  // Every chunk of the previous job is done (its caller waited for them), so nobody reads chunk_ now.
  chunk_ = &chunk;
  done_.store(0, std::memory_order_relaxed);
  const uint64_t tag = (tag_of(job_word_.load(std::memory_order_relaxed)) + 1) & ((uint64_t{1} << 20) - 1);
  const uint64_t job = tag << (2 * kChunkBits) | uint64_t(chunks) << kChunkBits;
  job_word_.store(job, std::memory_order_release);  // publishes chunk_ and done_
  {
    std::lock_guard lk(m_);
    if (sleepers_) go_.notify_all();
  }
  take_chunks(job, 0);
  const auto all_done = [&] { return done_.load(std::memory_order_acquire) == chunks; };
  if (!spin_until(all_done)) {
    std::unique_lock lk(m_);
    caller_waiting_ = true;
    finished_.wait(lk, all_done);
    caller_waiting_ = false;
  }
}

bool ThreadPool::take_chunks(uint64_t job, unsigned t) {
  bool ran = false;
  uint64_t w = job_word_.load(std::memory_order_acquire);
  for (;;) {
    if (tag_of(w) != tag_of(job) || next_of(w) >= chunks_of(w)) return ran;
    if (!job_word_.compare_exchange_weak(w, w + 1, std::memory_order_acq_rel, std::memory_order_acquire))
      continue;
    const size_t chunks = chunks_of(w);
    (*chunk_)(next_of(w), t);
    ran = true;
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == chunks) {
      std::lock_guard lk(m_);
      if (caller_waiting_) finished_.notify_one();
    }
    w = job_word_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker(unsigned t) {
  // Workers run only on cores nothing else wants (SCHED_IDLE): beside another busy role they yield to its
  // threads, and their caller, which does not need them, does their share. Best effort: a system that
  // refuses leaves them as they are.
  sched_param none{};
  pthread_setschedparam(pthread_self(), SCHED_IDLE, &none);
  uint64_t seen = 0;   // the tag of the last job this worker looked at
  bool useful = true;  // it ran a chunk of that job: spin for the next one rather than sleep at once
  for (;;) {
    const auto fresh = [&] { return tag_of(job_word_.load(std::memory_order_acquire)) != seen || stop_; };
    if (!spin_until(fresh, useful ? kSpin : 0)) {
      std::unique_lock lk(m_);
      ++sleepers_;
      go_.wait(lk, fresh);
      --sleepers_;
    }
    if (stop_) return;
    const uint64_t job = job_word_.load(std::memory_order_acquire);
    seen = tag_of(job);
    useful = take_chunks(job, t);
  }
}

}  // namespace epd::model

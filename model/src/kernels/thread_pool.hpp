#pragma once
// A fixed set of threads that split one range of work. The caller's thread is thread 0, so one thread means
// no other thread at all. Who computes an item never changes how it is computed: results do not depend on
// the thread count or on which thread took which part.
//
// A model step runs a few hundred short jobs (one per matmul group and attention pass per layer),
// microseconds apart; waking a sleeping thread for each would cost more than many of the jobs. So between
// jobs the workers spin for a short while (about 100 µs) before they sleep, and the caller spins before it
// waits, as ggml's own thread pool does.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace epd::model {

class ThreadPool {
 public:
  explicit ThreadPool(unsigned threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  unsigned size() const { return threads_; }
  // fn(begin, end, thread) for each thread's part of [0, n), split statically: with T threads, thread t takes
  // [n*t/T, n*(t+1)/T). Returns when all parts are done.
  void run(size_t n, const std::function<void(size_t, size_t, unsigned)>& fn);
  // fn(chunk, thread) for every chunk in [0, chunks), handed out one at a time to whichever thread is free
  // (a thread slowed down by another process takes fewer). Returns when all are done.
  void run_chunks(size_t chunks, const std::function<void(size_t, unsigned)>& fn);

 private:
  using Job = std::function<void(unsigned)>;
  void dispatch(const Job& job);
  void worker(unsigned t);

  unsigned threads_;
  std::vector<std::thread> workers_;
  const Job* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<unsigned> pending_{0};
  std::atomic<size_t> next_chunk_{0};
  std::mutex m_;
  std::condition_variable go_, done_;
  unsigned sleepers_ = 0;        // workers waiting on go_ (under m_)
  bool caller_waiting_ = false;  // the caller waits on done_ (under m_)
  std::atomic<bool> stop_{false};
};

}  // namespace epd::model

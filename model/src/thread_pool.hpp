#pragma once
// A fixed set of threads that split one range of work, statically: with T threads, thread t takes
// [n*t/T, n*(t+1)/T). The caller's thread is thread 0, so one thread means no other thread at all.
// The split decides only who computes an item, never how: results do not depend on the thread count.
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
  // fn(begin, end, thread) for each thread's part of [0, n); returns when all parts are done.
  void run(size_t n, const std::function<void(size_t, size_t, unsigned)>& fn);

 private:
  void worker(unsigned t);
  unsigned threads_;
  std::vector<std::thread> workers_;
  std::mutex m_;
  std::condition_variable go_, done_;
  const std::function<void(size_t, size_t, unsigned)>* job_ = nullptr;
  size_t n_ = 0;
  uint64_t generation_ = 0;
  unsigned pending_ = 0;
  bool stop_ = false;
};

}  // namespace epd::model

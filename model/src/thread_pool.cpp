#include "thread_pool.hpp"

namespace epd::model {

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
  {
    std::lock_guard lk(m_);
    job_ = &fn;
    n_ = n;
    pending_ = threads_ - 1;
    ++generation_;
  }
  go_.notify_all();
  fn(0, n / threads_, 0);
  std::unique_lock lk(m_);
  done_.wait(lk, [this] { return pending_ == 0; });
  job_ = nullptr;
}

void ThreadPool::worker(unsigned t) {
  uint64_t seen = 0;
  for (;;) {
    const std::function<void(size_t, size_t, unsigned)>* job;
    size_t n;
    {
      std::unique_lock lk(m_);
      go_.wait(lk, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      job = job_;
      n = n_;
    }
    (*job)(n * t / threads_, n * (t + 1) / threads_, t);
    {
      std::lock_guard lk(m_);
      if (--pending_ == 0) done_.notify_one();
    }
  }
}

}  // namespace epd::model

#pragma once
// A timer thread that runs completions after a fixed delay, so an injected delay never blocks the thread that
// submitted. The delay is the same for every entry, so a FIFO is already in deadline order.
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace epd::transport::fault {

class DelayQueue : public std::enable_shared_from_this<DelayQueue> {
 public:
  // `fn(cancelled)`: cancelled is true when the queue stops before the deadline.
  using Task = std::function<void(bool cancelled)>;

  // The thread holds a reference until stop(), so a task may drop the last outside reference (or call stop)
  // without pulling the queue out from under the running loop.
  static std::shared_ptr<DelayQueue> start(std::chrono::microseconds delay) {
    std::shared_ptr<DelayQueue> q(new DelayQueue(delay));
    q->thread_ = std::thread([self = q] { self->run(); });
    return q;
  }
  ~DelayQueue() {
    if (thread_.joinable()) thread_.detach();  // only reached on the queue's own thread, after stop()
  }

  void post(Task task) {
    {
      std::lock_guard lock(mu_);
      if (!stopped_) {
        tasks_.push_back({std::chrono::steady_clock::now() + delay_, std::move(task)});
        cv_.notify_one();
        return;
      }
    }
    task(true);
  }

  // Runs every pending task as cancelled and joins the thread. Idempotent.
  void stop() {
    {
      std::lock_guard lock(mu_);
      if (stopped_) return;
      stopped_ = true;
    }
    cv_.notify_one();
    if (thread_.get_id() == std::this_thread::get_id())
      thread_.detach();
    else
      thread_.join();
    std::deque<Entry> left;
    {
      std::lock_guard lock(mu_);
      left.swap(tasks_);
    }
    for (auto& e : left) e.task(true);
  }

 private:
  struct Entry {
    std::chrono::steady_clock::time_point due;
    Task task;
  };

  void run() {
    std::unique_lock lock(mu_);
    while (!stopped_) {
      if (tasks_.empty()) {
        cv_.wait(lock);
        continue;
      }
      if (cv_.wait_until(lock, tasks_.front().due) == std::cv_status::no_timeout &&
          std::chrono::steady_clock::now() < tasks_.front().due)
        continue;  // woken early: re-check stop and the head
      if (stopped_) break;
      Entry e = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      e.task(false);
      lock.lock();
    }
  }

  explicit DelayQueue(std::chrono::microseconds delay) : delay_(delay) {}

  const std::chrono::microseconds delay_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> tasks_;
  bool stopped_ = false;
  std::thread thread_;
};

}  // namespace epd::transport::fault

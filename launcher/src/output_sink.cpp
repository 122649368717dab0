#include "epd/launcher/output_sink.hpp"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

namespace epd::launcher {
namespace {

sigset_t sigpipe_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGPIPE);
  return s;
}

// The failed write left a SIGPIPE pending on this thread (it is blocked here); take it so it is not
// delivered later if the mask ever changes.
void consume_pending_sigpipe() {
  sigset_t s = sigpipe_set();
  timespec zero{};
  sigtimedwait(&s, nullptr, &zero);
}

}  // namespace

void OutputSink::child_line(std::string_view id, std::string_view text) {
  std::string line;
  line.reserve(id.size() + text.size() + 3);
  line.append("[").append(id).append("] ").append(text);
  write_line(line);
}

FdSink::FdSink(int fd, size_t max_queued_bytes) : fd_(fd), max_queued_bytes_(max_queued_bytes) {
  writer_ = std::thread([this] { run(); });
}

FdSink::~FdSink() {
  {
    std::unique_lock lock(mu_);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    cv_.wait_until(lock, deadline, [&] { return (queue_.empty() && !in_flight_) || broken_; });
    stopping_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

void FdSink::write_line(std::string_view line) {
  {
    std::lock_guard lock(mu_);
    if (broken_) return;
    if (queued_bytes_ + line.size() + 1 > max_queued_bytes_) {
      ++dropped_;
      return;
    }
    std::string s;
    s.reserve(line.size() + 1);
    s.append(line).push_back('\n');
    queued_bytes_ += s.size();
    queue_.push_back(std::move(s));
  }
  cv_.notify_all();
}

uint64_t FdSink::dropped_lines() const {
  std::lock_guard lock(mu_);
  return dropped_;
}

bool FdSink::broken() const {
  std::lock_guard lock(mu_);
  return broken_;
}

void FdSink::run() {
  // SIGPIPE is thread-directed: blocked here, a write to a closed pipe just returns EPIPE.
  sigset_t pipe_set = sigpipe_set();
  pthread_sigmask(SIG_BLOCK, &pipe_set, nullptr);

  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty() || broken_) {
      if (stopping_) return;
      continue;
    }
    std::string chunk;
    if (dropped_ != dropped_reported_) {
      chunk =
          "[launcher] output too slow: " + std::to_string(dropped_ - dropped_reported_) + " lines dropped\n";
      dropped_reported_ = dropped_;
    }
    // Batch whole lines into one write; only this thread writes to fd_, so lines stay whole.
    while (!queue_.empty() && chunk.size() < 64 * 1024) {
      chunk += queue_.front();
      queued_bytes_ -= queue_.front().size();
      queue_.pop_front();
    }
    in_flight_ = true;
    lock.unlock();
    bool ok = write_all(chunk);
    lock.lock();
    in_flight_ = false;
    if (!ok) {
      broken_ = true;
      queue_.clear();
      queued_bytes_ = 0;
    }
    cv_.notify_all();
  }
}

bool FdSink::write_all(std::string_view data) {
  while (!data.empty()) {
    // Wait for room with a timeout so a stopping sink never hangs in write() on a full pipe.
    pollfd p{fd_, POLLOUT, 0};
    int r = ::poll(&p, 1, 100);
    if (r < 0 && errno != EINTR) return false;
    if (r <= 0) {
      std::lock_guard lock(mu_);
      if (stopping_) return false;
      continue;
    }
    if (p.revents & (POLLERR | POLLNVAL)) return false;
    // At most a page per write: after POLLOUT, a pipe takes that much without blocking.
    ssize_t n = ::write(fd_, data.data(), std::min<size_t>(data.size(), 4096));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      if (errno == EPIPE) consume_pending_sigpipe();
      return false;
    }
    data.remove_prefix(size_t(n));
  }
  return true;
}

void CallbackSink::write_line(std::string_view line) {
  std::lock_guard lock(mu_);
  fn_(line);
}

}  // namespace epd::launcher

#pragma once
// Where prefixed child lines and the launcher's own lines go. Every line is delivered whole, and lines
// from different children never interleave.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>

namespace epd::launcher {

class OutputSink {
 public:
  virtual ~OutputSink() = default;
  // `line` has no trailing newline.
  virtual void write_line(std::string_view line) = 0;

  void child_line(std::string_view id, std::string_view text);
  void launcher_line(std::string_view text) { child_line("launcher", text); }
};

// Writes to a file descriptor (stdout by default) from its own thread through a bounded queue, so a slow
// or stuck reader of our stdout can never stall reaping or shutdown: when the queue is full, lines are
// dropped and counted. A closed reader (EPIPE) is not fatal: SIGPIPE is blocked in the writer thread and
// output is discarded from then on.
class FdSink : public OutputSink {
 public:
  explicit FdSink(int fd = 1, size_t max_queued_bytes = 4 << 20);
  ~FdSink() override;  // flushes for at most one second, then drops the rest
  void write_line(std::string_view line) override;
  uint64_t dropped_lines() const;
  bool broken() const;  // the reader went away

 private:
  void run();
  bool write_all(std::string_view data);

  int fd_;
  size_t max_queued_bytes_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  size_t queued_bytes_ = 0;
  uint64_t dropped_ = 0;
  uint64_t dropped_reported_ = 0;
  bool in_flight_ = false;  // the writer holds lines taken off the queue
  bool stopping_ = false;
  bool broken_ = false;
  std::thread writer_;
};

// Hands each line to a callback, synchronously and serialised (tests capture lines with it).
class CallbackSink : public OutputSink {
 public:
  explicit CallbackSink(std::function<void(std::string_view)> fn) : fn_(std::move(fn)) {}
  void write_line(std::string_view line) override;

 private:
  std::mutex mu_;
  std::function<void(std::string_view)> fn_;
};

}  // namespace epd::launcher

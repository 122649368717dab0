#pragma once
// Runs a set of child processes as one unit: starts them in order, prints their output line by line
// prefixed with their id, restarts the ones that die (backoff + limit), and stops them all - SIGTERM to
// each child's process group, a bounded grace, then SIGKILL - leaving no orphans.
//
// One supervisor thread does all forking, reading and reaping (PDEATHSIG is tied to the forking thread,
// so it must outlive the children). Other threads only ask it things under a mutex.
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "epd/launcher/child_spec.hpp"
#include "epd/launcher/output_sink.hpp"
#include "epd/protocol/result.hpp"

namespace epd::launcher {

enum class ChildState {
  running,      // a process is up
  backing_off,  // died; waiting out the backoff before the next start
  gave_up,      // died too often within the window (or restarts disabled)
  stopped,      // stopped by stop()
};
std::string_view child_state_name(ChildState s);

struct ChildStatus {
  std::string id;
  pid_t pid = 0;  // current process, 0 when none
  ChildState state = ChildState::running;
  uint64_t restarts = 0;  // total restarts since start()
  std::string last_exit;  // "killed by signal 9 (SIGKILL)", empty if it never died
};

class ProcessGroup {
 public:
  ProcessGroup(GroupOptions options, std::shared_ptr<OutputSink> sink);
  ~ProcessGroup();  // stop()
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts every child, in order. If one cannot be started, the ones already running are stopped and
  // the error names the failing child. Call once.
  protocol::Status start(std::vector<ChildSpec> children);

  // Stops every child; returns within stop_grace + kill_wait (plus a short output drain). Idempotent.
  void stop();

  // Restarts one running child on request (a rolling restart): SIGTERM to its process group, so it can
  // drain, SIGKILL after stop_grace, then starts it again at once. Not counted against the restart policy,
  // and done even with restarts disabled. Returns the new pid; an error if the id is unknown, the child is
  // not running, the group is stopping, or the child is not running again within `timeout`.
  protocol::Result<pid_t> restart(std::string_view id, std::chrono::milliseconds timeout);

  std::vector<ChildStatus> status() const;
  std::optional<ChildStatus> status(std::string_view id) const;
  // Children running or waiting to be restarted (neither given up nor stopped).
  size_t alive() const;

 private:
  struct Child;
  struct Stream;

  void run(std::vector<ChildSpec> specs);
  bool start_initial(std::vector<ChildSpec>& specs);
  enum class Why { first, crashed, requested };
  std::optional<protocol::Error> spawn(size_t index, Why why);
  void pump_output(int timeout_ms);
  void read_stream(Stream& s);
  void reap(bool stopping);
  void restart_due();
  void restart_requested();
  void shutdown();
  void wake();
  size_t running_count() const;

  GroupOptions options_;
  std::shared_ptr<OutputSink> sink_;
  int wake_pipe_[2] = {-1, -1};
  std::thread thread_;
  std::mutex join_mu_;  // stop() may be called from several threads; one joins

  mutable std::mutex mu_;  // guards children_ state and the flags below
  std::condition_variable started_cv_;
  std::condition_variable spawned_cv_;  // a child was (re)started, or the group is stopping
  std::vector<Child> children_;
  std::vector<Stream> streams_;  // supervisor thread only
  // read_stream's buffer (supervisor thread only). A member, not thread_local: every thread of every
  // process that links the launcher would carry a thread_local's 64 KB, written when the thread starts.
  std::vector<char> read_buf_ = std::vector<char>(64 * 1024);
  bool start_done_ = false;
  std::optional<protocol::Error> start_error_;
  bool stop_requested_ = false;
  bool started_ = false;
};

}  // namespace epd::launcher

#include "epd/launcher/process_group.hpp"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <sstream>

#include "epd/launcher/exit_status.hpp"
#include "epd/launcher/line_splitter.hpp"
#include "epd/launcher/restart_tracker.hpp"
#include "epd/launcher/spawn.hpp"

namespace epd::launcher {

using Clock = std::chrono::steady_clock;
using protocol::ErrorCode;
using protocol::make_error;
using std::chrono::milliseconds;

namespace {

std::string join_argv(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& a : argv) {
    if (!s.empty()) s += ' ';
    s += a;
  }
  return s;
}

// Signals a child and everything in its process group. The direct kill also reaches a child that moved
// itself into another group.
void kill_child(pid_t pid, int sig) {
  ::kill(-pid, sig);
  ::kill(pid, sig);
}

// True while a process group has a member that is not a zombie. Orphaned grandchildren are reparented
// to an init that may reap them late; their zombies must not make stop() wait out the whole grace.
bool group_has_live_members(pid_t pgid) {
  if (::kill(-pgid, 0) != 0) return false;
  DIR* proc = opendir("/proc");
  if (!proc) return true;
  bool live = false;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/stat");
    std::string stat;
    if (!std::getline(in, stat)) continue;
    // Fields after the parenthesised command: state ppid pgrp ...
    auto close_paren = stat.rfind(')');
    if (close_paren == std::string::npos) continue;
    std::istringstream rest(stat.substr(close_paren + 1));
    char state = 0;
    long ppid = 0, pgrp = 0;
    if (!(rest >> state >> ppid >> pgrp)) continue;
    if (pgrp == pgid && state != 'Z' && state != 'X') {
      live = true;
      break;
    }
  }
  closedir(proc);
  return live;
}

}  // namespace

std::string_view child_state_name(ChildState s) {
  switch (s) {
    case ChildState::running:
      return "running";
    case ChildState::backing_off:
      return "backing_off";
    case ChildState::gave_up:
      return "gave_up";
    case ChildState::stopped:
      return "stopped";
  }
  return "?";
}

struct ProcessGroup::Child {
  Child(ChildSpec s, const RestartPolicy& policy) : spec(std::move(s)), tracker(policy) {}

  ChildSpec spec;
  RestartTracker tracker;
  pid_t pid = 0;
  ChildState state = ChildState::running;
  std::string last_exit;
  Clock::time_point restart_at{};
  // restart() asked for a restart: SIGTERM once (term_sent), SIGKILL at kill_at if it is still running.
  bool restart_requested = false;
  bool term_sent = false;
  Clock::time_point kill_at{};
  bool start_requested = false;  // its pending start (backing_off) ends a requested restart
};

// One child's output pipe. A restarted child gets a new pipe; the old one is read until EOF (a grandchild
// may still hold it), so no line is lost across a restart.
struct ProcessGroup::Stream {
  std::string id;
  int fd = -1;
  LineSplitter splitter;
};

ProcessGroup::ProcessGroup(GroupOptions options, std::shared_ptr<OutputSink> sink)
    : options_(options), sink_(std::move(sink)) {}

ProcessGroup::~ProcessGroup() {
  stop();
  for (int fd : wake_pipe_)
    if (fd >= 0) close(fd);
}

protocol::Status ProcessGroup::start(std::vector<ChildSpec> children) {
  std::set<std::string> ids;
  for (const auto& c : children) {
    if (c.id.empty()) return make_error(ErrorCode::config_error, "a child has an empty id");
    if (!ids.insert(c.id).second)
      return make_error(ErrorCode::config_error, "duplicate child id '" + c.id + "'");
  }
  {
    std::lock_guard lock(mu_);
    if (started_) return make_error(ErrorCode::internal, "ProcessGroup::start called twice");
    started_ = true;
  }
  if (pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0)
    return make_error(ErrorCode::io_error, std::string("pipe: ") + strerror(errno));

  thread_ = std::thread([this, specs = std::move(children)]() mutable { run(std::move(specs)); });
  std::unique_lock lock(mu_);
  started_cv_.wait(lock, [&] { return start_done_; });
  if (start_error_) {
    protocol::Error e = *start_error_;
    lock.unlock();
    thread_.join();
    return e;
  }
  return {};
}

void ProcessGroup::stop() {
  {
    std::lock_guard lock(mu_);
    if (!started_) return;
    stop_requested_ = true;
  }
  spawned_cv_.notify_all();
  wake();
  // Only the first caller joins; later ones find the thread already joined.
  std::lock_guard join_lock(join_mu_);
  if (thread_.joinable()) thread_.join();
}

protocol::Result<pid_t> ProcessGroup::restart(std::string_view id, milliseconds timeout) {
  std::unique_lock lock(mu_);
  auto it = std::find_if(children_.begin(), children_.end(), [&](const Child& c) { return c.spec.id == id; });
  if (it == children_.end()) return make_error(ErrorCode::config_error, "no child '" + std::string(id) + "'");
  Child& c = *it;
  if (stop_requested_) return make_error(ErrorCode::aborted, "the group is stopping");
  if (c.state != ChildState::running || c.pid <= 0)
    return make_error(ErrorCode::internal,
                      c.spec.id + " is not running (" + std::string(child_state_name(c.state)) + ")");
  if (c.restart_requested) return make_error(ErrorCode::internal, c.spec.id + " is already restarting");
  const pid_t old = c.pid;
  c.restart_requested = true;
  c.term_sent = false;
  lock.unlock();
  wake();
  lock.lock();
  const bool back = spawned_cv_.wait_for(lock, timeout, [&] {
    return stop_requested_ || (c.state == ChildState::running && c.pid > 0 && c.pid != old) ||
           c.state == ChildState::gave_up;
  });
  if (stop_requested_) return make_error(ErrorCode::aborted, "the group is stopping");
  if (!back || c.state != ChildState::running)
    return make_error(ErrorCode::timeout,
                      c.spec.id + " did not start again within " + describe_ms(timeout.count()) +
                          (c.last_exit.empty() ? "" : " (last exit: " + c.last_exit + ")"));
  return c.pid;
}

std::vector<ChildStatus> ProcessGroup::status() const {
  std::lock_guard lock(mu_);
  std::vector<ChildStatus> out;
  for (const auto& c : children_)
    out.push_back({c.spec.id, c.pid, c.state, c.tracker.total_restarts(), c.last_exit});
  return out;
}

std::optional<ChildStatus> ProcessGroup::status(std::string_view id) const {
  std::lock_guard lock(mu_);
  for (const auto& c : children_)
    if (c.spec.id == id)
      return ChildStatus{c.spec.id, c.pid, c.state, c.tracker.total_restarts(), c.last_exit};
  return std::nullopt;
}

size_t ProcessGroup::alive() const {
  std::lock_guard lock(mu_);
  return size_t(std::count_if(children_.begin(), children_.end(), [](const Child& c) {
    return c.state == ChildState::running || c.state == ChildState::backing_off;
  }));
}

void ProcessGroup::wake() {
  char b = 1;
  if (wake_pipe_[1] >= 0) {
    ssize_t ignored = ::write(wake_pipe_[1], &b, 1);  // full pipe: a wake-up is already pending
    (void)ignored;
  }
}

size_t ProcessGroup::running_count() const {
  return size_t(std::count_if(children_.begin(), children_.end(), [](const Child& c) { return c.pid > 0; }));
}

void ProcessGroup::run(std::vector<ChildSpec> specs) {
  bool ok = start_initial(specs);
  {
    std::lock_guard lock(mu_);
    if (ok) start_done_ = true;
  }
  if (!ok) {
    shutdown();
    std::lock_guard lock(mu_);
    start_done_ = true;
    started_cv_.notify_all();
    return;
  }
  started_cv_.notify_all();

  for (;;) {
    {
      std::lock_guard lock(mu_);
      if (stop_requested_) break;
    }
    // Sleep until output arrives, a wake-up, the next due restart, or a reaping tick. There is no SIGCHLD
    // handler (a library must not own process-wide signals), so deaths are noticed within one tick.
    int timeout_ms = 50;
    auto now = Clock::now();
    for (const auto& c : children_)
      if (c.state == ChildState::backing_off)
        timeout_ms = int(std::clamp<long long>(ms_between(now, c.restart_at), 0, timeout_ms));
    pump_output(timeout_ms);
    reap(false);
    restart_due();
    restart_requested();
  }
  shutdown();
}

bool ProcessGroup::start_initial(std::vector<ChildSpec>& specs) {
  for (auto& spec : specs) {
    {
      std::lock_guard lock(mu_);
      children_.emplace_back(std::move(spec), options_.restart);
    }
    if (auto err = spawn(children_.size() - 1, Why::first)) {
      std::lock_guard lock(mu_);
      children_.back().state = ChildState::stopped;
      start_error_ = std::move(*err);
      return false;
    }
  }
  return true;
}

std::optional<protocol::Error> ProcessGroup::spawn(size_t index, Why why) {
  Child& c = children_[index];
  auto r = spawn_child(c.spec);
  if (!r) return r.error();
  {
    std::lock_guard lock(mu_);
    c.pid = r->pid;
    c.state = ChildState::running;
  }
  spawned_cv_.notify_all();
  streams_.push_back(Stream{c.spec.id, r->output_fd, LineSplitter()});
  if (why == Why::crashed)
    sink_->launcher_line("restarted " + c.spec.id + " (pid " + std::to_string(r->pid) + ", restart " +
                         std::to_string(c.tracker.total_restarts()) + ")");
  else if (why == Why::requested)
    sink_->launcher_line("started " + c.spec.id + " again (pid " + std::to_string(r->pid) + ", on request)");
  else
    sink_->launcher_line("started " + c.spec.id + " (pid " + std::to_string(r->pid) +
                         "): " + join_argv(c.spec.argv));
  return std::nullopt;
}

void ProcessGroup::pump_output(int timeout_ms) {
  std::vector<pollfd> fds;
  fds.push_back({wake_pipe_[0], POLLIN, 0});
  for (const auto& s : streams_) fds.push_back({s.fd, POLLIN, 0});
  int n = ::poll(fds.data(), fds.size(), timeout_ms);
  if (n <= 0) return;
  if (fds[0].revents) {
    char buf[64];
    while (::read(wake_pipe_[0], buf, sizeof buf) > 0) {
    }
  }
  for (size_t i = 1; i < fds.size(); ++i)
    if (fds[i].revents) read_stream(streams_[i - 1]);
  std::erase_if(streams_, [](const Stream& s) { return s.fd < 0; });
}

void ProcessGroup::read_stream(Stream& s) {
  auto emit = [&](std::string_view line) { sink_->child_line(s.id, line); };
  // A few reads per round at most, so one chatty child cannot starve the others or reaping.
  for (int round = 0; round < 4 && s.fd >= 0; ++round) {
    ssize_t got = ::read(s.fd, read_buf_.data(), read_buf_.size());
    if (got > 0) {
      s.splitter.feed(std::string_view(read_buf_.data(), size_t(got)), emit);
      continue;
    }
    if (got < 0 && (errno == EAGAIN || errno == EINTR)) break;
    s.splitter.finish(emit);  // EOF (or a broken pipe): the stream is done
    close(s.fd);
    s.fd = -1;
  }
}

void ProcessGroup::reap(bool stopping) {
  for (auto& c : children_) {
    if (c.pid <= 0) continue;
    int status = 0;
    pid_t r = waitpid(c.pid, &status, WNOHANG);
    if (r == 0 || (r < 0 && errno == EINTR)) continue;
    pid_t pid = c.pid;
    // Print what it wrote last before saying it died (its last words usually explain why).
    for (auto& s : streams_)
      if (s.id == c.spec.id) read_stream(s);
    std::string what =
        r < 0 ? std::string("vanished (waitpid: ") + strerror(errno) + ")" : describe_wait_status(status);
    std::string head = c.spec.id + " (pid " + std::to_string(pid) + ") " + what;
    if (stopping) {
      std::lock_guard lock(mu_);
      c.pid = 0;
      c.state = ChildState::stopped;
      c.last_exit = what;
    } else if (c.restart_requested) {  // restart(): start it again now, not counted as a crash
      ::kill(-pid, SIGKILL);
      std::lock_guard lock(mu_);
      c.pid = 0;
      c.last_exit = what;
      c.restart_requested = false;
      c.start_requested = true;
      c.state = ChildState::backing_off;
      c.restart_at = Clock::now();
      head += "; starting it again (restart requested)";
    } else {
      // Its grandchildren would be orphans now, and a restarted instance must not compete with them.
      ::kill(-pid, SIGKILL);
      std::lock_guard lock(mu_);
      c.pid = 0;
      c.last_exit = what;
      auto d = c.tracker.on_exit(Clock::now());
      const auto& p = c.tracker.policy();
      if (d.restart) {
        c.state = ChildState::backing_off;
        c.restart_at = Clock::now() + d.delay;
        head += "; restarting in " + describe_ms(d.delay.count()) + " (restart " + std::to_string(d.attempt) +
                "/" + std::to_string(p.max_restarts) + ")";
      } else {
        c.state = ChildState::gave_up;
        head += !p.enabled ? "; not restarting (restarts disabled)"
                           : "; giving up: " + std::to_string(p.max_restarts) + " restarts within " +
                                 describe_ms(p.window.count());
      }
    }
    sink_->launcher_line(head);
  }
}

void ProcessGroup::restart_requested() {
  const auto now = Clock::now();
  for (Child& c : children_) {
    pid_t pid = 0;
    bool term = false, kill = false;
    {
      std::lock_guard lock(mu_);
      if (!c.restart_requested || c.pid <= 0) continue;
      pid = c.pid;
      if (!c.term_sent) {
        c.term_sent = term = true;
        c.kill_at = now + options_.stop_grace;
      } else if (now >= c.kill_at) {
        kill = true;
        c.kill_at = now + options_.kill_wait;  // at most one SIGKILL per kill_wait
      }
    }
    if (term) {
      sink_->launcher_line("restarting " + c.spec.id + " (pid " + std::to_string(pid) +
                           ") on request: SIGTERM, SIGKILL after " +
                           describe_ms(options_.stop_grace.count()));
      kill_child(pid, SIGTERM);
    } else if (kill) {
      sink_->launcher_line(c.spec.id + " (pid " + std::to_string(pid) + ") still running after " +
                           describe_ms(options_.stop_grace.count()) + "; sending SIGKILL");
      kill_child(pid, SIGKILL);
    }
  }
}

void ProcessGroup::restart_due() {
  auto now = Clock::now();
  for (size_t i = 0; i < children_.size(); ++i) {
    Child& c = children_[i];
    if (c.state != ChildState::backing_off || c.restart_at > now) continue;
    const Why why = c.start_requested ? Why::requested : Why::crashed;
    c.start_requested = false;
    auto err = spawn(i, why);
    if (!err) continue;
    // Could not even exec (binary removed?): counts as another death of this child.
    std::unique_lock lock(mu_);
    c.last_exit = err->detail;
    auto d = c.tracker.on_exit(Clock::now());
    std::string line = "restart of " + c.spec.id + " failed: " + err->detail;
    if (d.restart) {
      c.restart_at = Clock::now() + d.delay;
      line += "; retrying in " + describe_ms(d.delay.count());
    } else {
      c.state = ChildState::gave_up;
      line += "; giving up";
    }
    lock.unlock();  // never call out to the sink while holding mu_
    sink_->launcher_line(line);
  }
}

void ProcessGroup::shutdown() {
  std::set<pid_t> groups;
  {
    std::lock_guard lock(mu_);
    for (auto& c : children_) {
      if (c.state == ChildState::backing_off) c.state = ChildState::stopped;
      if (c.pid > 0) groups.insert(c.pid);
    }
  }
  auto begin = Clock::now();
  if (!groups.empty()) {
    sink_->launcher_line("stopping " + std::to_string(groups.size()) + " children: SIGTERM, SIGKILL after " +
                         describe_ms(options_.stop_grace.count()));
    for (const auto& c : children_)
      if (c.pid > 0) kill_child(c.pid, SIGTERM);
  }
  // Done when every child is reaped and its process group is empty (grandchildren get the grace too).
  auto all_gone = [&] {
    if (running_count() > 0) return false;
    return std::none_of(groups.begin(), groups.end(), group_has_live_members);
  };
  auto deadline = begin + options_.stop_grace;
  while (!all_gone() && Clock::now() < deadline) {
    pump_output(int(std::clamp<long long>(ms_between(Clock::now(), deadline), 0, 20)));
    reap(true);
  }
  if (!all_gone()) {
    for (const auto& c : children_)
      if (c.pid > 0) {
        sink_->launcher_line(c.spec.id + " (pid " + std::to_string(c.pid) + ") still running after " +
                             describe_ms(options_.stop_grace.count()) + "; sending SIGKILL");
        kill_child(c.pid, SIGKILL);
      }
    for (pid_t g : groups) ::kill(-g, SIGKILL);
    auto kill_deadline = Clock::now() + options_.kill_wait;
    while (running_count() > 0 && Clock::now() < kill_deadline) {
      pump_output(int(std::clamp<long long>(ms_between(Clock::now(), kill_deadline), 0, 20)));
      reap(true);
    }
    for (const auto& c : children_)
      if (c.pid > 0)
        sink_->launcher_line(c.spec.id + " (pid " + std::to_string(c.pid) + ") not reaped " +
                             describe_ms(options_.kill_wait.count()) + " after SIGKILL; giving up on it");
  }
  // Last output: read what is still buffered in the pipes, briefly.
  auto drain_deadline = Clock::now() + milliseconds(300);
  while (!streams_.empty() && Clock::now() < drain_deadline) pump_output(20);
  for (auto& s : streams_) {
    s.splitter.finish([&](std::string_view line) { sink_->child_line(s.id, line); });
    close(s.fd);
  }
  streams_.clear();
  if (!groups.empty())
    sink_->launcher_line("all children stopped in " + describe_ms(ms_between(begin, Clock::now())));
}

}  // namespace epd::launcher

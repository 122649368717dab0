#pragma once
// Helpers for the launcher tests: wait with a bound, check that a process is really gone, capture the
// lines a ProcessGroup prints, and run an executable with its output piped back.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "epd/launcher/output_sink.hpp"

namespace epd::launcher::test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline bool wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!pred()) {
    if (Clock::now() >= deadline) return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// Gone = no such process, or only a zombie left for init to reap (not ours to wait for).
inline bool process_gone(pid_t pid) {
  if (pid <= 0) return true;
  if (::kill(pid, 0) != 0) return true;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return true;
  auto p = stat.rfind(')');
  char state = p + 2 < stat.size() ? stat[p + 2] : '?';
  return state == 'Z' || state == 'X';
}

inline bool wait_gone(pid_t pid, std::chrono::milliseconds timeout = 3000ms) {
  return wait_until([&] { return process_gone(pid); }, timeout);
}

// Collects every line a ProcessGroup prints, with the time it arrived.
struct Captured {
  std::mutex mu;
  std::vector<std::string> lines;
  std::vector<Clock::time_point> times;

  std::shared_ptr<OutputSink> sink() {
    return std::make_shared<CallbackSink>([this](std::string_view line) {
      std::lock_guard lock(mu);
      lines.emplace_back(line);
      times.push_back(Clock::now());
    });
  }
  std::vector<std::string> snapshot() {
    std::lock_guard lock(mu);
    return lines;
  }
  size_t count_containing(const std::string& needle) {
    std::lock_guard lock(mu);
    size_t n = 0;
    for (const auto& l : lines) n += l.find(needle) != std::string::npos;
    return n;
  }
  bool wait_for(const std::string& needle, std::chrono::milliseconds timeout = 3000ms, size_t times = 1) {
    return wait_until([&] { return count_containing(needle) >= times; }, timeout);
  }
  std::string joined() {
    std::lock_guard lock(mu);
    std::string s;
    for (const auto& l : lines) s += l + "\n";
    return s;
  }
};

// A temporary directory removed (recursively) at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "epd-launcher-test-XXXXXX").string();
    path = mkdtemp(tmpl.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::filesystem::path write(const std::string& name, const std::string& text, bool executable = false) {
    auto p = path / name;
    std::filesystem::create_directories(p.parent_path());
    std::ofstream(p) << text;
    if (executable)
      std::filesystem::permissions(p, std::filesystem::perms::owner_all | std::filesystem::perms::group_read |
                                          std::filesystem::perms::group_exec);
    return p;
  }
};

// A process started by a test, stdout+stderr piped back. Killed (SIGKILL) and reaped at scope exit if
// the test did not wait for it: a failing test leaves nothing behind.
class Proc {
 public:
  explicit Proc(std::vector<std::string> argv) {
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(out[1], 2);
      setpgid(0, 0);  // so cleanup can take its whole tree if the launcher itself misbehaves
      signal(SIGPIPE, SIG_DFL);
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    fd_ = out[0];
  }
  ~Proc() {
    if (pid_ > 0 && !status_) {
      ::kill(-pid_, SIGKILL);
      ::kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    close_output();
  }
  pid_t pid() const { return pid_; }

  // Reads output until `needle` appears (true) or EOF / timeout (false).
  bool read_until(const std::string& needle, std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (output_.find(needle) == std::string::npos) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0 || fd_ < 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, int(left)) <= 0) continue;
      char buf[4096];
      ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n <= 0) {
        close_output();
        return output_.find(needle) != std::string::npos;
      }
      output_.append(buf, size_t(n));
    }
    return true;
  }
  // Reads everything until EOF (bounded).
  void read_all(std::chrono::milliseconds timeout) { read_until(std::string(1, '\0'), timeout); }
  void close_output() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  const std::string& output() const { return output_; }

  // The wait status, or nullopt after `timeout` (then the process is still there).
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    auto deadline = Clock::now() + timeout;
    while (!status_) {
      int st = 0;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = st;
        break;
      }
      if (Clock::now() >= deadline) break;
      // Keep draining output so the child never blocks on a full pipe while we wait for it.
      if (fd_ >= 0) {
        pollfd p{fd_, POLLIN, 0};
        if (::poll(&p, 1, 10) > 0) {
          char buf[4096];
          ssize_t n = ::read(fd_, buf, sizeof buf);
          if (n > 0)
            output_.append(buf, size_t(n));
          else
            close_output();
        }
      } else {
        std::this_thread::sleep_for(10ms);
      }
    }
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string output_;
  std::optional<int> status_;
};

// The pid in the first line containing `prefix`, e.g. "[launcher] started c0 (pid " -> 1234.
inline pid_t pid_after(const std::string& text, const std::string& prefix) {
  auto p = text.find(prefix);
  if (p == std::string::npos) return -1;
  return pid_t(std::atoi(text.c_str() + p + prefix.size()));
}

}  // namespace epd::launcher::test

#pragma once
// What /proc says about the processes a bench started: their children and their memory.
#include <sys/types.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

namespace epd::bench {

// A /proc/PID/status memory field (VmRSS, VmHWM: given in kB) in MiB; 0 when absent or the process is gone.
inline double status_mib(pid_t pid, std::string_view field) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  const std::string key = std::string(field) + ":";
  for (std::string line; std::getline(f, line);)
    if (line.rfind(key, 0) == 0) return double(std::stoull(line.substr(key.size()))) / 1024;
  return 0;
}

// The processes `pid` started, from any of its threads (/proc/PID/task/*/children); none if it is gone.
inline std::vector<pid_t> child_pids(pid_t pid) {
  std::vector<pid_t> out;
  std::error_code ec;
  const auto tasks = std::filesystem::path("/proc") / std::to_string(pid) / "task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream children(task.path() / "children");
    for (pid_t child; children >> child;) out.push_back(child);
  }
  return out;
}

// The peak resident set size (VmHWM) of `root` and of every process below it, summed, in MiB: what the
// processes of one server held at their most (a sum of peaks, an upper bound of the peak of the sum).
inline double tree_peak_rss_mib(pid_t root) {
  double mib = 0;
  std::vector<pid_t> todo{root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    mib += status_mib(p, "VmHWM");
    for (pid_t child : child_pids(p)) todo.push_back(child);
  }
  return mib;
}

}  // namespace epd::bench

#include "membership_fleet.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <sstream>
#include <thread>

namespace epd::bench {

namespace {
// Commands in flight to one process before its answers are read: both pipes' buffers (64 KiB) hold them.
constexpr size_t kInFlight = 256;
}  // namespace

Fleet::Fleet(const MembershipOptions& opt, std::string backend, std::string endpoint, int routers)
    : opt_(opt), backend_(std::move(backend)), endpoint_(std::move(endpoint)), routers_(routers) {}

Fleet::~Fleet() {
  // All told at once: each stops its instances in parallel, then exits.
  for (auto& w : workers_) std::fclose(w->to);
  for (auto& w : workers_) {
    int status = 0;
    waitpid(w->pid, &status, 0);
    std::fclose(w->from);
    if (!w->dead && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      std::fprintf(stderr, "membership bench: worker %d ended with status %d\n", int(w->pid), status);
  }
}

Fleet::Worker* Fleet::spawn(bool for_router) {
  int cmd[2], ans[2];
  if (pipe2(cmd, O_CLOEXEC) != 0) return nullptr;
  if (pipe2(ans, O_CLOEXEC) != 0) {
    close(cmd[0]);
    close(cmd[1]);
    return nullptr;
  }
  const std::string interval = std::to_string(opt_.interval.count());
  const std::string ttl = std::to_string(opt_.lease_ttl.count());
  std::vector<const char*> args{"epd-bench",      "membership",      "--worker",      backend_.c_str(),
                                "--endpoint",     endpoint_.c_str(), "--interval-ms", interval.c_str(),
                                "--lease-ttl-ms", ttl.c_str()};
  if (!opt_.shared_threads) args.push_back("--own-threads");
  if (!for_router && opt_.shared_threads) args.push_back("--packed");
  args.push_back(nullptr);
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec: this process may have other threads. Both ends move above
    // 3 and 4 first, so that neither dup2 overwrites the other.
    const int c = fcntl(cmd[0], F_DUPFD, 10), a = fcntl(ans[1], F_DUPFD, 10);
    if (c < 0 || a < 0 || dup2(c, 3) < 0 || dup2(a, 4) < 0) _exit(127);
    if (!for_router && opt_.instances_nice > 0) setpriority(PRIO_PROCESS, 0, opt_.instances_nice);
    execv("/proc/self/exe", const_cast<char* const*>(args.data()));
    _exit(127);
  }
  close(cmd[0]);
  close(ans[1]);
  if (pid < 0) {
    close(cmd[1]);
    close(ans[0]);
    return nullptr;
  }
  auto w = std::make_unique<Worker>();
  w->pid = pid;
  w->to = fdopen(cmd[1], "w");
  w->from = fdopen(ans[0], "r");
  w->routers = for_router;
  // It starts knowing the fleet.
  for (const auto& [id, where] : live_) tell(*w, "expect " + id + " " + std::to_string(where.second));
  workers_.push_back(std::move(w));
  return workers_.back().get();
}

Fleet::Worker* Fleet::place(bool router) {
  if (!router)
    for (auto& w : workers_)
      if (!w->routers && !w->dead && w->members < opt_.per_process) return w.get();
  return spawn(router);
}

void Fleet::tell(Worker& w, const std::string& line) {
  if (w.dead) return;
  std::fputs(line.c_str(), w.to);
  std::fputc('\n', w.to);
}

void Fleet::tell_all(const std::string& line) {
  for (auto& w : workers_) {
    tell(*w, line);
    std::fflush(w->to);
  }
}

std::optional<std::string> Fleet::answer(Worker& w) {
  if (w.dead) return std::nullopt;
  std::fflush(w.to);
  // One line of any length (a list of rejoins can be long).
  std::string s;
  for (int c; (c = std::fgetc(w.from)) != '\n';) {
    if (c == EOF) {
      w.dead = true;
      std::fprintf(stderr, "membership bench: worker %d stopped answering\n", int(w.pid));
      return std::nullopt;
    }
    s.push_back(char(c));
  }
  return s;
}

std::optional<std::string> Fleet::ask(Worker& w, const std::string& line) {
  tell(w, line);
  return answer(w);
}

bool Fleet::add(const std::vector<std::string>& ids) {
  static const char* const roles[3] = {"encoder", "prefill", "decode"};
  bool ok = true;
  // Paced (--start-rate): a quarter of a second's instances at a time, each group when its time comes.
  const size_t group = opt_.start_rate > 0 ? size_t(std::max(1, opt_.start_rate / 4)) : kInFlight;
  const auto began = clock::now();
  for (size_t from = 0; from < ids.size(); from += group) {
    if (opt_.start_rate > 0)
      std::this_thread::sleep_until(began + std::chrono::milliseconds(from * 1000 / size_t(opt_.start_rate)));
    const size_t to = std::min(ids.size(), from + group);
    std::vector<Worker*> at;
    for (size_t i = from; i < to; ++i) {
      const bool router = started_ < routers_;
      const std::string role = router ? std::string(protocol::kRouterRole) : roles[started_ % 3];
      ++started_;
      Worker* w = place(router);
      if (!w) {
        std::fprintf(stderr, "membership bench: no worker process for %s: %s\n", ids[i].c_str(),
                     std::strerror(errno));
        return false;
      }
      ++w->members;
      tell(*w, "add " + ids[i] + " " + role + " " + (router ? "1" : "0"));
      at.push_back(w);
    }
    for (auto& w : workers_) std::fflush(w->to);  // every process starts its share at once
    std::vector<std::pair<std::string, uint64_t>> started;
    for (size_t i = from; i < to; ++i) {
      Worker* w = at[i - from];
      auto a = answer(*w);
      if (!a || a->rfind("ok ", 0) != 0) {
        --w->members;
        ok = false;
        continue;
      }
      const uint64_t incarnation = std::stoull(a->substr(3));
      live_[ids[i]] = {w, incarnation};
      started.emplace_back(ids[i], incarnation);
    }
    for (auto& w : workers_)
      for (const auto& [id, inc] : started) tell(*w, "expect " + id + " " + std::to_string(inc));
  }
  for (auto& w : workers_) std::fflush(w->to);
  return ok;
}

void Fleet::kill(const std::string& id) {
  auto it = live_.find(id);
  if (it == live_.end()) return;
  Worker* w = it->second.first;
  tell(*w, "kill " + id);
  std::fflush(w->to);
  --w->members;
  live_.erase(it);
  tell_all("forget " + id);
}

Fleet::Frozen Fleet::freeze(std::chrono::milliseconds d) {
  for (auto& w : workers_) {
    if (w->routers || w->members == 0 || w->dead) continue;
    ::kill(w->pid, SIGSTOP);
    std::this_thread::sleep_for(d);
    Frozen f{w->members, std::nullopt};
    if (has_routers())
      for (const auto& [id, where] : live_)
        if (where.first == w.get()) {
          f.unlisted_before_resume = unlisted_by_routers(id);
          break;
        }
    ::kill(w->pid, SIGCONT);
    // A process answers "pending" from what agreed before; the stall took peers out of directories since.
    tell_all("recheck");
    return f;
  }
  return {};
}

std::optional<std::string> Fleet::kill_router() {
  if (routers_ < 2) return std::nullopt;
  const std::string id = "sim-" + std::to_string(routers_ - 1);  // the first ever started are the routers
  auto it = live_.find(id);
  if (it == live_.end()) return std::nullopt;
  Worker* w = it->second.first;
  ::kill(w->pid, SIGKILL);
  w->dead = true;  // its exit status is the kill's, not a failure of the bench
  w->members = 0;
  live_.erase(it);
  tell_all("forget " + id);
  return id;
}

int Fleet::follow_rejoins() {
  std::vector<std::pair<std::string, uint64_t>> changed;
  for (auto& w : workers_) {
    if (w->members == 0 || w->dead) continue;
    auto a = ask(*w, "rejoined");
    if (!a) continue;
    std::istringstream in(*a);
    size_t n = 0;
    in >> n;
    for (size_t i = 0; i < n; ++i) {
      std::string id;
      uint64_t incarnation = 0;
      in >> id >> incarnation;
      auto it = live_.find(id);
      if (it == live_.end() || it->second.second == incarnation) continue;
      it->second.second = incarnation;
      changed.emplace_back(id, incarnation);
    }
  }
  rejoins_ += int(changed.size());
  for (auto& w : workers_) {
    for (const auto& [id, incarnation] : changed)
      tell(*w, "expect " + id + " " + std::to_string(incarnation));
    std::fflush(w->to);
  }
  return int(changed.size());
}

std::optional<double> Fleet::converge_ms(clock::time_point since, std::chrono::milliseconds limit,
                                         const std::function<void()>& each_poll) {
  // Each round asks every process that has not yet agreed, which checks its instances' directories: at
  // 1,000 instances a 500 us round took an eighth of a worker's CPU in steady state (perf), work no real
  // fleet does. 5 us per instance: 5 ms at 1,000, against changes that take hundreds.
  const auto poll = std::chrono::microseconds(std::max<int64_t>(500, int64_t(live_.size()) * 5));
  std::vector<Worker*> waiting;
  auto ask_all = [&] {
    waiting.clear();
    for (auto& w : workers_)
      if (w->members > 0) waiting.push_back(w.get());
  };
  ask_all();
  while (true) {
    // A rejoin changes what every directory must list, those that agreed already too.
    if (follow_rejoins() > 0) ask_all();
    if (each_poll) each_poll();
    std::optional<std::string> behind;
    while (!waiting.empty()) {
      auto a = ask(*waiting.back(), "pending");
      if (!a) return std::nullopt;
      if (*a != "none") {
        behind = *a;
        break;
      }
      waiting.pop_back();
    }
    if (waiting.empty()) break;
    if (clock::now() - since > limit) {
      // Twice, 2 s apart: stuck, or only behind?
      auto what = ask(*waiting.back(), "describe " + *behind);
      std::this_thread::sleep_for(std::chrono::seconds(2));
      auto later = ask(*waiting.back(), "describe " + *behind);
      std::fprintf(stderr, "membership bench: %s; 2 s later %s; %zu are live\n",
                   what.value_or(*behind).c_str(), later.value_or("no answer").c_str(), live_.size());
      // The routers hold what etcd (or the registry) says: are they behind too, or only the instance?
      for (auto& w : workers_) {
        if (!w->routers || w->members == 0 || w->dead) continue;
        auto r = ask(*w, "pending");
        if (r && *r != "none") r = ask(*w, "describe " + *r);
        std::fprintf(stderr, "membership bench: router process %d: %s\n", int(w->pid),
                     !r             ? "no answer"
                     : *r == "none" ? "lists every live instance"
                                    : r->c_str());
      }
      return std::nullopt;
    }
    std::this_thread::sleep_for(poll);
  }
  if (each_poll) each_poll();
  return std::chrono::duration<double, std::milli>(clock::now() - since).count();
}

bool Fleet::ask_routers(const std::string& line) {
  for (auto& w : workers_) {
    if (!w->routers || w->members == 0) continue;
    auto a = ask(*w, line);
    if (!a || *a != "1") return false;
  }
  return true;
}

bool Fleet::routed_around(const std::string& id) {
  return ask_routers("routed " + id);
}
bool Fleet::unlisted_by_routers(const std::string& id) {
  return ask_routers("unlisted " + id);
}
bool Fleet::placeable_everywhere(const std::string& id) {
  return ask_routers("placeable " + id);
}
bool Fleet::all_placeable_everywhere() {
  follow_rejoins();
  return ask_routers("all_placeable");
}

Fleet::Traffic Fleet::traffic() {
  Traffic t;
  for (auto& w : workers_) {
    auto a = ask(*w, "traffic");
    if (!a) continue;
    // "<bytes in> <bytes out> <frames out> <member bytes or -> <n> <name> <value>..."
    std::istringstream in(*a);
    uint64_t bi = 0, bo = 0, fo = 0;
    std::string member;
    size_t n = 0;
    in >> bi >> bo >> fo >> member >> n;
    t.bytes_in += bi;
    t.bytes_out += bo;
    t.frames_out += fo;
    if (member != "-") t.member_bytes = t.member_bytes.value_or(0) + std::stoull(member);
    for (size_t i = 0; i < n; ++i) {
      std::string name;
      double v = 0;
      in >> name >> v;
      if (t.counters.size() <= i) t.counters.emplace_back(name, 0.0);
      t.counters[i].second += v;
    }
  }
  return t;
}

}  // namespace epd::bench

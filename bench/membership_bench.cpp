#include "membership_bench.hpp"

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>
#include <caf/all.hpp>

#include <signal.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "epd/actors/bridge.hpp"
#include "epd/actors/load_gauge.hpp"
#include "epd/actors/membership.hpp"
#include "registry.hpp"
#include "stats.hpp"

namespace epd::bench {
namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct Options {
  int instances = 300;
  int changes = 10;            // kills, then as many adds
  milliseconds interval{500};  // the clusters' default heartbeat_interval_ms
  uint32_t misses = 3;
  std::vector<std::string> backends{"router-full", "router"};
};

// Where membership lives, as the instances see it: started before any instance, reached at an endpoint,
// costing CPU. Each backend is one implementation; an etcd backend (instances keep their descriptors under
// a lease and watch a prefix) adds one more, with its own member side, behind make_backend().
class RegistryBackend {
 public:
  virtual ~RegistryBackend() = default;
  virtual std::string describe() const = 0;
  virtual bool start(const Options& opt) = 0;
  virtual std::string endpoint() const = 0;  // what members say HELLO to
  virtual double cpu_seconds() const = 0;    // the registry's CPU so far (user + system)
  virtual void stop() = 0;
};

// The embedded registry (the router's) in a child process: a bridge and the registry actor, nothing else.
// `full_lists` selects the behaviour before PEERS deltas, as the baseline.
class EmbeddedRegistry final : public RegistryBackend {
 public:
  explicit EmbeddedRegistry(bool full_lists) : full_lists_(full_lists) {}
  ~EmbeddedRegistry() override { stop(); }

  std::string describe() const override {
    return full_lists_ ? "embedded registry, full PEERS lists (before)" : "embedded registry, PEERS deltas";
  }

  bool start(const Options& opt) override {
    std::fflush(stdout);  // the child must not print the parent's buffered lines again
    int to_parent[2], from_parent[2];
    if (pipe(to_parent) != 0 || pipe(from_parent) != 0) return false;
    pid_ = fork();
    if (pid_ < 0) return false;
    if (pid_ == 0) {
      close(to_parent[0]);
      close(from_parent[1]);
      _exit(child_main(opt, to_parent[1], from_parent[0]));
    }
    close(to_parent[1]);
    close(from_parent[0]);
    control_ = from_parent[1];
    char buf[256];
    const ssize_t n = read(to_parent[0], buf, sizeof buf);
    close(to_parent[0]);
    if (n <= 0) return false;
    endpoint_.assign(buf, size_t(n));
    return true;
  }

  std::string endpoint() const override { return endpoint_; }

  double cpu_seconds() const override {
    std::ifstream f("/proc/" + std::to_string(pid_) + "/stat");
    std::string line;
    std::getline(f, line);
    auto close_paren = line.rfind(')');
    if (close_paren == std::string::npos) return 0;
    std::istringstream rest(line.substr(close_paren + 2));
    std::string field;
    double ticks = 0;
    // Fields 3.. after the name; utime and stime are fields 14 and 15.
    for (int i = 3; i <= 15 && rest >> field; ++i)
      if (i >= 14) ticks += std::stod(field);
    return ticks / double(sysconf(_SC_CLK_TCK));
  }

  void stop() override {
    if (pid_ <= 0) return;
    close(control_);  // the child exits when its end of the pipe reads EOF
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
  }

 private:
  int child_main(const Options& opt, int report_fd, int control_fd) {
    auto bridge = actors::Bridge::start("registry", actors::fresh_incarnation(), "tcp://127.0.0.1:*", {},
                                        actors::LivenessConfig{opt.interval, opt.misses});
    if (!bridge) {
      std::fprintf(stderr, "registry: %s\n", bridge.error().to_string().c_str());
      return 1;
    }
    caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 1);
    caf::actor_system system{cfg};
    actors::RegistryConfig rc{opt.interval, opt.misses, full_lists_};
    auto registry =
        actors::spawn_registry(system, bridge.value(), rc, std::make_shared<actors::RegistryView>());
    bridge.value()->wired();
    const std::string ep = bridge.value()->endpoint();
    if (write(report_fd, ep.data(), ep.size()) != ssize_t(ep.size())) return 1;
    close(report_fd);
    char c;
    while (read(control_fd, &c, 1) > 0) {
    }
    caf::anon_send_exit(registry, caf::exit_reason::user_shutdown);
    bridge.value()->stop();
    return 0;
  }

  bool full_lists_;
  pid_t pid_ = -1;
  int control_ = -1;
  std::string endpoint_;
};

std::unique_ptr<RegistryBackend> make_backend(const std::string& name) {
  if (name == "router") return std::make_unique<EmbeddedRegistry>(false);
  if (name == "router-full") return std::make_unique<EmbeddedRegistry>(true);
  return nullptr;
}

// One simulated instance: what membership needs and nothing more.
struct Member {
  std::string id;
  actors::BridgePtr bridge;
  caf::actor membership;
};

class Simulation {
 public:
  Simulation(const Options& opt, std::string registry_endpoint)
      : opt_(opt), registry_(std::move(registry_endpoint)), system_(make_config()) {}
  ~Simulation() {
    for (auto& [_, m] : live_) stop(m);
  }

  bool add(const std::string& id) {
    auto bridge = actors::Bridge::start(id, actors::fresh_incarnation(), "tcp://127.0.0.1:*", {},
                                        actors::LivenessConfig{opt_.interval, opt_.misses});
    if (!bridge) {
      std::fprintf(stderr, "membership bench: %s: %s\n", id.c_str(), bridge.error().to_string().c_str());
      return false;
    }
    actors::MembershipConfig mc;
    mc.registry_endpoint = registry_;
    mc.role = roles_[live_.size() % 3];
    mc.heartbeat_interval = opt_.interval;
    mc.heartbeat_misses = opt_.misses;
    Member m{id, bridge.value(), {}};
    m.membership = actors::spawn_membership(system_, m.bridge, mc, std::make_shared<actors::LoadGauge>(), {});
    m.bridge->wired();
    live_[id] = std::move(m);
    return true;
  }

  // As a kill -9 does: its sockets close, it says nothing.
  void kill(const std::string& id) {
    auto it = live_.find(id);
    if (it == live_.end()) return;
    stop(it->second);
    live_.erase(it);
  }

  // Waits until every live instance lists exactly the live instances at their incarnations.
  std::optional<double> converge_ms(clock::time_point since, milliseconds limit) {
    std::map<std::string, uint64_t> expected;
    for (const auto& [id, m] : live_) expected[id] = m.bridge->incarnation();
    auto it = live_.begin();
    while (it != live_.end()) {
      if (it->second.bridge->peers().incarnations() == expected) {
        ++it;
        continue;
      }
      if (clock::now() - since > limit) {
        std::fprintf(stderr, "membership bench: '%s' lists %zu instances (version %llu), %zu are live\n",
                     it->first.c_str(), it->second.bridge->peers().incarnations().size(),
                     (unsigned long long)it->second.bridge->peers().version(), expected.size());
        return std::nullopt;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
    return std::chrono::duration<double, std::milli>(clock::now() - since).count();
  }

  // Control-plane bytes the instances received (registry → instances) and sent (HELLO, HEARTBEAT).
  std::pair<uint64_t, uint64_t> bytes() const {
    uint64_t in = retired_in_, out = retired_out_;
    for (const auto& [_, m] : live_) {
      auto s = m.bridge->stats();
      in += s.bytes_received;
      out += s.bytes_sent;
    }
    return {in, out};
  }

  const std::map<std::string, Member>& live() const { return live_; }

 private:
  static caf::actor_system_config& make_config() {
    static caf::actor_system_config cfg;
    cfg.set("scheduler.max-threads", 2);
    return cfg;
  }
  void stop(Member& m) {
    auto s = m.bridge->stats();
    retired_in_ += s.bytes_received;
    retired_out_ += s.bytes_sent;
    caf::anon_send_exit(m.membership, caf::exit_reason::kill);
    m.bridge->stop();
  }

  Options opt_;
  std::string registry_;
  caf::actor_system system_;
  std::map<std::string, Member> live_;
  uint64_t retired_in_ = 0, retired_out_ = 0;
  const char* roles_[3] = {"encoder", "prefill", "decode"};
};

struct Row {
  std::string backend;
  double start_converge_ms = 0;
  std::vector<double> kill_ms, add_ms;
  double bytes_per_change = 0;  // registry → instances, per kill or add
  double registry_cpu_ms_per_change = 0;
  double registry_cpu_pct_steady = 0;  // heartbeats only, no change
  double heartbeat_bytes_per_s = 0;
  int failed = 0;
};

std::optional<Row> run_backend(const Options& opt, const std::string& name) {
  auto backend = make_backend(name);
  if (!backend) {
    std::fprintf(stderr, "membership bench: unknown backend '%s' (router, router-full)\n", name.c_str());
    return std::nullopt;
  }
  if (!backend->start(opt)) {
    std::fprintf(stderr, "membership bench: %s did not start\n", name.c_str());
    return std::nullopt;
  }
  Row row;
  row.backend = name;
  {
    Simulation sim(opt, backend->endpoint());
    // Start in batches of 25, each converged before the next: with full lists a start of everyone at once
    // costs O(N^3) bytes and, on a small host, stalls the registry into expiring members it is still
    // telling about the others.
    const auto t0 = clock::now();
    for (int i = 0; i < opt.instances; ++i) {
      if (!sim.add("sim-" + std::to_string(i))) return std::nullopt;
      if ((i + 1) % 25 != 0 && i + 1 != opt.instances) continue;
      if (!sim.converge_ms(clock::now(), std::chrono::seconds(60))) {
        std::fprintf(stderr, "membership bench: %s: %d instances did not converge in 60 s\n", name.c_str(),
                     i + 1);
        return std::nullopt;
      }
    }
    row.start_converge_ms = std::chrono::duration<double, std::milli>(clock::now() - t0).count();

    // Steady state: heartbeats only.
    const double cpu0 = backend->cpu_seconds();
    const auto [in0, out0] = sim.bytes();
    const auto s0 = clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double secs = std::chrono::duration<double>(clock::now() - s0).count();
    row.registry_cpu_pct_steady = 100.0 * (backend->cpu_seconds() - cpu0) / secs;
    row.heartbeat_bytes_per_s = double(sim.bytes().second - out0) / secs;
    (void)in0;

    // Changes, one at a time: kill one, wait until everyone agrees; then add one, likewise.
    const double cpu1 = backend->cpu_seconds();
    const auto [in1, out1] = sim.bytes();
    (void)out1;
    const auto c0 = clock::now();
    const milliseconds limit = opt.interval * (opt.misses + 4);
    for (int k = 0; k < opt.changes; ++k) {
      sim.kill("sim-" + std::to_string(k * 7 % opt.instances));
      auto ms = sim.converge_ms(clock::now(), limit);
      if (ms)
        row.kill_ms.push_back(*ms);
      else
        ++row.failed;
    }
    for (int k = 0; k < opt.changes; ++k) {
      sim.add("new-" + std::to_string(k));
      auto ms = sim.converge_ms(clock::now(), limit);
      if (ms)
        row.add_ms.push_back(*ms);
      else
        ++row.failed;
    }
    const double change_secs = std::chrono::duration<double>(clock::now() - c0).count();
    const double cpu_changes = backend->cpu_seconds() - cpu1;
    const auto [in2, out2] = sim.bytes();
    (void)out2;
    const int n_changes = 2 * opt.changes;
    // Heartbeat-only traffic runs during the changes too: ERROR / HELLO_ACK are the only other frames in,
    // so the bytes in are the changes' own; the steady CPU rate is taken out of the changes' CPU.
    row.bytes_per_change = double(in2 - in1) / n_changes;
    row.registry_cpu_ms_per_change =
        1000.0 * std::max(0.0, cpu_changes - row.registry_cpu_pct_steady / 100.0 * change_secs) / n_changes;
  }
  backend->stop();
  return row;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
double max_of(const std::vector<double>& v) {
  return v.empty() ? 0 : *std::max_element(v.begin(), v.end());
}

// Each instance holds a ZeroMQ context (an I/O thread and a few descriptors) and two connections with the
// registry: 1,000 of them need more descriptors than the usual soft limit of 1,024.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  const rlim_t before = r.rlim_cur;
  r.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &r) == 0 && before != r.rlim_cur)
    std::printf(
        "RLIMIT_NOFILE raised from %llu to %llu (each simulated instance has its own ZeroMQ context)\n",
        (unsigned long long)before, (unsigned long long)r.rlim_cur);
}

}  // namespace

int run_membership_cli(int argc, char** argv) {
  Options opt;
  bool backends_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    std::optional<std::string> v;
    if ((a == "--instances" || a == "--changes" || a == "--interval-ms" || a == "--backend") &&
        !(v = value())) {
      std::fprintf(stderr, "epd-bench membership: %s needs a value\n", a.c_str());
      return 2;
    }
    try {
      if (a == "--instances")
        opt.instances = std::stoi(*v);
      else if (a == "--changes")
        opt.changes = std::stoi(*v);
      else if (a == "--interval-ms")
        opt.interval = milliseconds(std::stoi(*v));
      else if (a == "--backend") {
        if (!backends_given) opt.backends.clear();
        backends_given = true;
        opt.backends.push_back(*v);
      } else {
        std::fprintf(stderr,
                     "usage: epd-bench membership [--instances 300] [--changes 10] [--interval-ms 500]\n"
                     "                            [--backend router-full --backend router]\n");
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "epd-bench membership: %s: not a number: %s\n", a.c_str(), v->c_str());
      return 2;
    }
  }
  if (opt.instances < 2 || opt.instances > 1000 || opt.changes < 1 || opt.changes > opt.instances / 2 ||
      opt.interval.count() < 10) {
    std::fprintf(stderr,
                 "epd-bench membership: --instances 2..1000 (one ZeroMQ context holds at most 1,023 sockets: "
                 "the registry's), --changes 1..instances/2, --interval-ms >= 10\n");
    return 2;
  }
  raise_fd_limit();
  spdlog::set_level(spdlog::level::warn);  // joins and leaves by the thousand; warnings still show
  std::printf(
      "membership: %d simulated instances, %d kills then %d adds one at a time, heartbeat %lld ms x %u\n",
      opt.instances, opt.changes, opt.changes, (long long)opt.interval.count(), opt.misses);
  std::vector<Row> rows;
  for (const auto& name : opt.backends) {
    auto row = run_backend(opt, name);
    if (!row) return 1;
    rows.push_back(*row);
  }
  std::printf("\n%-12s %10s %10s %10s %10s %10s %14s %12s %12s %12s %6s\n", "backend", "start ms", "kill p50",
              "kill max", "add p50", "add max", "bytes/change", "reg cpu ms", "reg cpu %", "hb bytes/s",
              "fail");
  for (const auto& r : rows)
    std::printf("%-12s %10.1f %10.1f %10.1f %10.1f %10.1f %14.0f %12.2f %12.1f %12.0f %6d\n",
                r.backend.c_str(), r.start_converge_ms, median(r.kill_ms), max_of(r.kill_ms),
                median(r.add_ms), max_of(r.add_ms), r.bytes_per_change, r.registry_cpu_ms_per_change,
                r.registry_cpu_pct_steady, r.heartbeat_bytes_per_s, r.failed);
  std::printf(
      "(kill/add: ms from the change until every live instance lists exactly the live instances; "
      "bytes/change: registry -> instances; reg cpu ms: registry process CPU per change, steady rate "
      "taken out; reg cpu %%: heartbeats only)\n");
  if (rows.size() == 2 && rows[0].backend == "router-full" && rows[1].backend == "router") {
    auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
    std::printf(
        "deltas vs full lists: bytes/change %.1fx fewer, registry cpu/change %.1fx less, steady %.1fx less, "
        "kill p50 %.2fx, add p50 %.2fx\n",
        ratio(rows[0].bytes_per_change, rows[1].bytes_per_change),
        ratio(rows[0].registry_cpu_ms_per_change, rows[1].registry_cpu_ms_per_change),
        ratio(rows[0].registry_cpu_pct_steady, rows[1].registry_cpu_pct_steady),
        ratio(median(rows[1].kill_ms), median(rows[0].kill_ms)),
        ratio(median(rows[1].add_ms), median(rows[0].add_ms)));
  }
  int failed = 0;
  for (const auto& r : rows) failed += r.failed;
  return failed == 0 ? 0 : 1;
}

}  // namespace epd::bench

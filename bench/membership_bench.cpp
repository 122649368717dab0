#include "membership_bench.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/spdlog.h>

#include "host_load.hpp"
#include "membership_backend.hpp"
#include "membership_fleet.hpp"
#include "stats.hpp"

namespace epd::bench {
namespace {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

struct MembershipRow {
  std::string backend;
  double start_converge_ms = 0;
  double start_spawned_ms = 0;    // of which spent starting the instances (bridge, membership actor) here
  double start_placeable_ms = 0;  // with routers: until every router would place on every instance
  std::vector<double> kill_ms, add_ms;
  double bytes_per_change = 0;  // registry → instances, per kill or add
  double registry_cpu_ms_per_change = 0;
  double registry_cpu_pct_steady = 0;  // heartbeats only, no change
  double heartbeat_bytes_per_s = 0;
  double heartbeats_per_s = 0;
  int failed = 0;
  std::string error;  // set when the start did not converge: no figures
  // With routers among the instances (etcd): after a kill, until no router would place on it and until no
  // router lists it; after an add, until every router would place on it.
  std::vector<double> routed_ms, unlisted_ms, placeable_ms;
  std::vector<std::pair<std::string, double>> steady_rates;  // the backend's counters per second
  int rejoins_at_start = 0;  // instances expired during the start that rejoined as a new incarnation
  // --freeze: instances of the process stopped, how long, rejoins it caused, ms from its resumption until
  // every directory agreed again (nullopt: not within the limit).
  int frozen = 0;
  milliseconds frozen_for{0};
  int freeze_rejoins = 0;
  std::optional<double> freeze_ms;
  // --kill-router: ms from the kill -9 of a router until every directory agreed, and from an addition after
  // it until every directory listed it (nullopt: not within the limit).
  std::optional<double> router_kill_ms, add_after_router_kill_ms;
};

std::vector<std::pair<std::string, double>> rates(const std::vector<std::pair<std::string, double>>& before,
                                                  const std::vector<std::pair<std::string, double>>& after,
                                                  double secs) {
  std::vector<std::pair<std::string, double>> out;
  for (size_t i = 0; i < before.size() && i < after.size(); ++i)
    out.emplace_back(before[i].first, (after[i].second - before[i].second) / secs);
  return out;
}

std::optional<MembershipRow> run_backend(const MembershipOptions& opt, const std::string& name) {
  auto backend = make_backend(name);
  if (!backend) {
    std::fprintf(stderr, "membership bench: unknown backend '%s' (router, router-full, etcd, etcd-routers)\n",
                 name.c_str());
    return std::nullopt;
  }
  if (!backend->start(opt)) {
    std::fprintf(stderr, "membership bench: %s did not start\n", name.c_str());
    return std::nullopt;
  }
  std::printf("%s: %s\n", name.c_str(), backend->describe().c_str());
  std::fflush(stdout);
  MembershipRow row;
  row.backend = name;
  const int routers = backend->routers();
  auto bytes_in = [&](Fleet& sim) -> uint64_t {
    auto t = sim.traffic();
    return t.member_bytes ? *t.member_bytes : t.bytes_in;
  };
  // etcd's counters and the instances' own (their HTTP calls and connections), from one traffic answer.
  auto counters = [&](const Fleet::Traffic& t) {
    auto c = backend->counters();
    for (const auto& kv : t.counters) c.push_back(kv);
    return c;
  };
  {
    Fleet sim(opt, name, backend->member_endpoint(), routers);
    // Everyone at once, as a cluster starts, until every instance lists every other (and, with routers,
    // every router would place on every instance). With full lists that costs O(N^3) bytes and, on a small
    // host, stalls the registry into expiring members it is still telling about the others: in batches of
    // 25 there, each converged before the next.
    const int batch = name == "router-full" ? 25 : opt.instances;
    // etcd's start lists every record per instance and fans every put out to every watcher: O(N^2) bytes.
    const auto start_limit =
        std::max<milliseconds>(std::chrono::seconds(60), milliseconds(150 * opt.instances));
    const auto t0 = clock::now();
    const double start_cpu0 = backend->cpu_seconds();
    for (int from = 0; from < opt.instances; from += batch) {
      std::vector<std::string> ids;
      for (int i = from; i < std::min(opt.instances, from + batch); ++i)
        ids.push_back("sim-" + std::to_string(i));
      if (!sim.add(ids)) {
        row.error = "an instance of sim-" + std::to_string(from) + ".. did not start";
        return row;
      }
      if (from + batch >= opt.instances) row.start_spawned_ms = ms_since(t0);
      if (!sim.converge_ms(clock::now(), start_limit)) {
        row.error = std::to_string(from + int(ids.size())) + " instances did not converge in " +
                    std::to_string(start_limit.count() / 1000) + " s";
        std::fprintf(stderr, "membership bench: %s: %s\n", name.c_str(), row.error.c_str());
        return row;
      }
    }
    row.start_converge_ms = ms_since(t0);
    row.rejoins_at_start = sim.rejoins();
    // The simulating process does every instance's share of the start on this host's cores (each decodes a
    // full list and every delta); the registry's (etcd's) CPU is what one real cluster would spend there.
    std::printf(
        "%s: start: every instance started after %.0f ms (in %zu processes), all listing all after %.0f ms; "
        "registry (etcd) CPU %.2f s; %.1f MB to the instances; %d rejoined as a new incarnation\n",
        name.c_str(), row.start_spawned_ms, sim.processes(), row.start_converge_ms,
        backend->cpu_seconds() - start_cpu0, double(bytes_in(sim)) / 1e6, row.rejoins_at_start);
    // Listed everywhere is not yet placeable: a router also needs each instance's first heartbeat.
    while (sim.has_routers() && !sim.all_placeable_everywhere() && clock::now() - t0 < start_limit)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    row.start_placeable_ms = ms_since(t0);

    // Steady state: heartbeats (and, with etcd, lease renewals) only.
    const double cpu0 = backend->cpu_seconds();
    const auto traffic0 = sim.traffic();  // every worker asked once per end of the window
    const auto counters0 = counters(traffic0);
    const auto s0 = clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double secs = std::chrono::duration<double>(clock::now() - s0).count();
    row.registry_cpu_pct_steady = 100.0 * (backend->cpu_seconds() - cpu0) / secs;
    const auto traffic1 = sim.traffic();
    row.heartbeat_bytes_per_s = double(traffic1.bytes_out - traffic0.bytes_out) / secs;
    row.heartbeats_per_s = double(traffic1.frames_out - traffic0.frames_out) / secs;
    row.steady_rates = rates(counters0, counters(traffic1), secs);

    // Changes, one at a time: kill one, wait until everyone agrees; then add one, likewise. Routers are
    // never killed (sim-0, sim-1 with etcd).
    const double cpu1 = backend->cpu_seconds();
    const uint64_t in1 = bytes_in(sim);
    const auto c0 = clock::now();
    const milliseconds limit = backend->kill_limit(opt);
    for (int k = 0; k < opt.changes; ++k) {
      const std::string victim = "sim-" + std::to_string(routers + k * 7 % (opt.instances - routers));
      std::optional<double> routed, unlisted;
      const auto t = clock::now();
      sim.kill(victim);
      auto ms = sim.converge_ms(t, limit, [&] {
        if (!sim.has_routers()) return;
        if (!routed && sim.routed_around(victim)) routed = ms_since(t);
        if (!unlisted && sim.unlisted_by_routers(victim)) unlisted = ms_since(t);
      });
      if (ms)
        row.kill_ms.push_back(*ms);
      else
        ++row.failed;
      if (routed) row.routed_ms.push_back(*routed);
      if (unlisted) row.unlisted_ms.push_back(*unlisted);
    }
    for (int k = 0; k < opt.changes; ++k) {
      const std::string id = "new-" + std::to_string(k);
      const auto t = clock::now();
      if (!sim.add(id)) {
        ++row.failed;
        continue;
      }
      std::optional<double> placeable;
      auto check = [&] {
        if (sim.has_routers() && !placeable && sim.placeable_everywhere(id)) placeable = ms_since(t);
      };
      auto ms = sim.converge_ms(t, limit, check);
      if (ms)
        row.add_ms.push_back(*ms);
      else
        ++row.failed;
      // Placeable needs the new instance's first heartbeat, which may come after everyone listed it.
      while (sim.has_routers() && !placeable && clock::now() - t < limit) {
        std::this_thread::sleep_for(std::chrono::microseconds(500));
        check();
      }
      if (placeable)
        row.placeable_ms.push_back(*placeable);
      else if (sim.has_routers())
        ++row.failed;
    }
    const double change_secs = std::chrono::duration<double>(clock::now() - c0).count();
    const double cpu_changes = backend->cpu_seconds() - cpu1;
    const int n_changes = 2 * opt.changes;
    // Heartbeat-only traffic runs during the changes too: ERROR / HELLO_ACK are the only other frames in,
    // so the bytes in are the changes' own; the steady CPU rate is taken out of the changes' CPU.
    row.bytes_per_change = double(bytes_in(sim) - in1) / n_changes;

    if (opt.freeze) {
      // A host that stalls: its instances are expired meanwhile (or their leases run out) and, resumed,
      // rejoin. Every directory must then list them again, at whatever incarnation they came back with.
      const int rejoins0 = sim.rejoins();
      row.frozen_for = backend->freeze_for(opt);
      const auto frozen = sim.freeze(row.frozen_for);
      row.frozen = frozen.instances;
      const auto t = clock::now();
      if (row.frozen > 0) row.freeze_ms = sim.converge_ms(t, start_limit);
      row.freeze_rejoins = sim.rejoins() - rejoins0;
      if (!row.freeze_ms) ++row.failed;
      std::printf(
          "%s: froze a process of %d instances for %lld ms (SIGSTOP)%s: %d rejoined as a new incarnation, "
          "every directory agreed %s\n",
          name.c_str(), row.frozen, (long long)row.frozen_for.count(),
          !frozen.unlisted_before_resume   ? ""
          : *frozen.unlisted_before_resume ? ", the routers had unlisted them"
                                           : ", the routers still listed them",
          row.freeze_rejoins,
          row.freeze_ms     ? (std::to_string(int64_t(*row.freeze_ms)) + " ms after it resumed").c_str()
          : row.frozen == 0 ? "- no process of instances to freeze"
                            : "not within the limit");
    }
    if (opt.kill_router && sim.has_routers()) {
      const auto t = clock::now();
      if (const auto killed = sim.kill_router()) {
        row.router_kill_ms = sim.converge_ms(t, limit);
        const auto t_add = clock::now();
        if (sim.add("after-" + *killed)) row.add_after_router_kill_ms = sim.converge_ms(t_add, limit);
        row.failed += !row.router_kill_ms + !row.add_after_router_kill_ms;
        auto said = [](const std::optional<double>& ms) {
          return ms ? std::to_string(int64_t(*ms)) + " ms" : std::string("not within the limit");
        };
        std::printf(
            "%s: killed router %s (kill -9): every directory agreed without it after %s; an instance added "
            "then was listed everywhere after %s\n",
            name.c_str(), killed->c_str(), said(row.router_kill_ms).c_str(),
            said(row.add_after_router_kill_ms).c_str());
      } else {
        std::printf("%s: --kill-router needs two routers\n", name.c_str());
      }
    }
    // The steady rate once more, after the changes: the mean of both windows is taken out. With etcd the
    // steady cost (lease renewals) is large beside a change's, and a kill waits seconds for the lease, so
    // a drift of the steady rate moves this figure a lot.
    const double cpu2 = backend->cpu_seconds();
    const auto s1 = clock::now();
    std::this_thread::sleep_for(std::chrono::seconds(2));
    const double steady_after =
        100.0 * (backend->cpu_seconds() - cpu2) / std::chrono::duration<double>(clock::now() - s1).count();
    const double steady = (row.registry_cpu_pct_steady + steady_after) / 2;
    row.registry_cpu_ms_per_change =
        1000.0 * std::max(0.0, cpu_changes - steady / 100.0 * change_secs) / n_changes;
  }
  backend->stop();
  return row;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
// Each instance holds a ZeroMQ context (an I/O thread and a few descriptors) and two connections with the
// registry: 1,000 of them need more descriptors than the usual soft limit of 1,024.
void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) != 0) return;
  const rlim_t before = r.rlim_cur;
  // A few descriptors per instance in this process and per member in the registry's: 5,000 need more than
  // the usual hard limit; a privileged run may raise that too.
  rlimit wanted{1 << 20, 1 << 20};
  if (r.rlim_max < wanted.rlim_max && setrlimit(RLIMIT_NOFILE, &wanted) == 0) r = wanted;
  r.rlim_cur = r.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &r) == 0 && before != r.rlim_cur)
    std::printf(
        "RLIMIT_NOFILE raised from %llu to %llu (sockets and connections of every simulated instance)\n",
        (unsigned long long)before, (unsigned long long)r.rlim_cur);
}

void print_rows(const std::vector<MembershipRow>& rows) {
  std::printf("\n%-12s %10s %10s %10s %10s %10s %14s %12s %12s %12s %6s\n", "backend", "start ms", "kill p50",
              "kill max", "add p50", "add max", "bytes/change", "reg cpu ms", "reg cpu %", "hb bytes/s",
              "fail");
  for (const auto& r : rows)
    if (!r.error.empty())
      std::printf("%-12s (%s)\n", r.backend.c_str(), r.error.c_str());
    else
      std::printf("%-12s %10.1f %10.1f %10.1f %10.1f %10.1f %14.0f %12.2f %12.1f %12.0f %6d\n",
                  r.backend.c_str(), r.start_converge_ms, median(r.kill_ms), max_of(r.kill_ms),
                  median(r.add_ms), max_of(r.add_ms), r.bytes_per_change, r.registry_cpu_ms_per_change,
                  r.registry_cpu_pct_steady, r.heartbeat_bytes_per_s, r.failed);
  std::printf(
      "(kill/add: ms from the change until every live instance lists exactly the live instances; "
      "bytes/change: registry -> instances (etcd: the HTTP bodies of watch events and listings the instances "
      "read, headers and chunk framing left out; etcd-routers: also the RECORDS frames the routers sent); "
      "reg cpu ms: registry (etcd) process CPU per change, steady "
      "rate taken out; reg cpu %%: heartbeats (and lease renewals) only)\n");
}

// The routers' side and the backend's own counters, for backends with routers among the instances.
void print_router_rows(const std::vector<MembershipRow>& rows) {
  bool any = false;
  for (const auto& r : rows) any = any || !r.routed_ms.empty() || !r.steady_rates.empty();
  if (!any) return;
  std::printf("\n%-12s %10s %10s %10s %10s %10s %10s %10s %10s\n", "backend", "start plc", "routed p50",
              "routed max", "unlist p50", "unlist max", "place p50", "place max", "hb/s");
  for (const auto& r : rows) {
    if (r.routed_ms.empty() && r.steady_rates.empty()) continue;
    std::printf("%-12s %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f %10.0f\n", r.backend.c_str(),
                r.start_placeable_ms, median(r.routed_ms), max_of(r.routed_ms), median(r.unlisted_ms),
                max_of(r.unlisted_ms), median(r.placeable_ms), max_of(r.placeable_ms), r.heartbeats_per_s);
    if (r.steady_rates.empty()) continue;
    std::printf("%-12s steady state, per second:", r.backend.c_str());
    for (const auto& [name, v] : r.steady_rates) std::printf(" %s %.1f", name.c_str(), v);
    std::printf("\n");
  }
  std::printf(
      "(start plc: ms from the first start until every router would place on every instance; routed: ms from "
      "a kill -9 until no router would place on it (its in-band heartbeats went silent); "
      "unlist: until no router lists it (its lease expired and the watch said so); place: ms from an add "
      "until every router would place on it; hb/s: in-band heartbeats sent by all instances; steady state: "
      "etcd's own counters while nothing changes - puts, deletes and raft proposals are writes, renewals are "
      "lease keep-alives (the leader answers them without a raft write), calls are the instances' calls "
      "answered (HTTP, and renewals on their gRPC streams), connections the TCP connections they opened)\n");
}

}  // namespace

int run_membership_cli(int argc, char** argv) {
  MembershipOptions opt;
  bool backends_given = false;
  std::optional<std::string> worker, endpoint;  // a worker process of the bench's (membership_fleet.hpp)
  bool packed = false;                          // a worker of many simulated instances (no router)
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::optional<std::string> {
      if (i + 1 >= argc) return std::nullopt;
      return std::string(argv[++i]);
    };
    std::optional<std::string> v;
    if ((a == "--instances" || a == "--changes" || a == "--interval-ms" || a == "--backend" ||
         a == "--lease-ttl-ms" || a == "--per-process" || a == "--instances-nice" || a == "--start-rate" ||
         a == "--worker" || a == "--endpoint") &&
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
      else if (a == "--lease-ttl-ms")
        opt.lease_ttl = milliseconds(std::stoi(*v));
      else if (a == "--per-process")
        opt.per_process = std::stoi(*v);
      else if (a == "--instances-nice")
        opt.instances_nice = std::stoi(*v);
      else if (a == "--start-rate")
        opt.start_rate = std::stoi(*v);
      else if (a == "--own-threads")
        opt.shared_threads = false;
      else if (a == "--freeze")
        opt.freeze = true;
      else if (a == "--kill-router")
        opt.kill_router = true;
      else if (a == "--worker")
        worker = *v;
      else if (a == "--packed")
        packed = true;
      else if (a == "--endpoint")
        endpoint = *v;
      else if (a == "--backend") {
        if (!backends_given) opt.backends.clear();
        backends_given = true;
        opt.backends.push_back(*v);
      } else {
        std::fprintf(stderr,
                     "usage: epd-bench membership [--instances 300] [--changes 10] [--interval-ms 500]\n"
                     "                            [--lease-ttl-ms 2000] [--own-threads] [--per-process 500]\n"
                     "                            [--instances-nice 10] [--start-rate 0] [--freeze]\n"
                     "                            [--kill-router]\n"
                     "                            [--backend router-full --backend router --backend etcd "
                     "--backend etcd-routers]\n");
        return 2;
      }
    } catch (const std::exception&) {
      std::fprintf(stderr, "epd-bench membership: %s: not a number: %s\n", a.c_str(), v->c_str());
      return 2;
    }
  }
  if (worker) {
    raise_fd_limit();
    return run_membership_worker(*worker, endpoint.value_or(""), opt, packed);
  }
  const int max_instances = opt.shared_threads ? 10000 : 1000;
  if (opt.instances < 4 || opt.instances > max_instances || opt.changes < 1 ||
      opt.changes > opt.instances / 2 || opt.interval.count() < 10 || opt.lease_ttl.count() < 2000 ||
      opt.per_process < 1 || opt.instances_nice < 0 || opt.instances_nice > 19 || opt.start_rate < 0) {
    std::fprintf(stderr,
                 "epd-bench membership: --instances 4..10000 (4..1000 with --own-threads: two threads per "
                 "instance), --changes 1..instances/2, --interval-ms >= 10, --lease-ttl-ms >= 2000 "
                 "(etcd raises shorter TTLs to 1.5 election timeouts), --per-process >= 1, --instances-nice "
                 "0..19, --start-rate >= 0\n");
    return 2;
  }
  raise_fd_limit();
  // A worker that died closed its pipe: the next command to it fails with EPIPE (and is reported) instead
  // of ending the bench.
  signal(SIGPIPE, SIG_IGN);
  spdlog::set_level(spdlog::level::warn);  // joins and leaves by the thousand; warnings still show
  std::printf(
      "membership: %d simulated instances, %d kills then %d adds one at a time, heartbeat %lld ms x %u, "
      "etcd lease TTL %lld ms; load average %s\n"
      "real: the registry (its own process) or etcd (its own server), every instance's membership code, its "
      "bridge and control channel with its own sockets and TCP connections; each router in a process of its "
      "own, the other instances %d to a worker process (at nice %d), sharing its two CAF threads and %s\n",
      opt.instances, opt.changes, opt.changes, (long long)opt.interval.count(), opt.misses,
      (long long)opt.lease_ttl.count(), load_average().c_str(), opt.per_process, opt.instances_nice,
      opt.shared_threads
          ? "one ZeroMQ context + one reading thread for every instance's sockets (a ChannelHub); with etcd "
            "one LeaseKeeper (one thread, one gRPC keep-alive stream) for every instance's own lease"
          : "nothing else (each instance has its own ZeroMQ context and reading thread)");
  if (opt.start_rate > 0)
    std::printf("start paced: %d instances a second (\"start\" figures include the pace)\n", opt.start_rate);
  std::vector<MembershipRow> rows;
  for (const auto& name : opt.backends) {
    auto row = run_backend(opt, name);
    if (!row) return 1;
    rows.push_back(*row);
  }
  print_rows(rows);
  std::printf("load average at the end: %s\n", load_average().c_str());
  print_router_rows(rows);
  auto find = [&](const char* name) -> const MembershipRow* {
    for (const auto& r : rows)
      if (r.backend == name) return &r;
    return nullptr;
  };
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  auto usable = [&](const char* name) -> const MembershipRow* {
    const MembershipRow* r = find(name);
    return r && r->error.empty() ? r : nullptr;
  };
  if (const MembershipRow* full = usable("router-full"), *deltas = usable("router"); full && deltas)
    std::printf(
        "deltas vs full lists: bytes/change %.1fx fewer, registry cpu/change %.1fx less, steady %.1fx less, "
        "kill p50 %.2fx, add p50 %.2fx\n",
        ratio(full->bytes_per_change, deltas->bytes_per_change),
        ratio(full->registry_cpu_ms_per_change, deltas->registry_cpu_ms_per_change),
        ratio(full->registry_cpu_pct_steady, deltas->registry_cpu_pct_steady),
        ratio(median(deltas->kill_ms), median(full->kill_ms)),
        ratio(median(deltas->add_ms), median(full->add_ms)));
  if (const MembershipRow* deltas = usable("router"), *etcd = usable("etcd"); deltas && etcd)
    std::printf(
        "etcd vs embedded deltas: bytes/change %.2fx, cpu/change %.2fx, steady cpu %.2fx, kill p50 %.2fx "
        "(the lease and the grace period), add p50 %.2fx\n",
        ratio(etcd->bytes_per_change, deltas->bytes_per_change),
        ratio(etcd->registry_cpu_ms_per_change, deltas->registry_cpu_ms_per_change),
        ratio(etcd->registry_cpu_pct_steady, deltas->registry_cpu_pct_steady),
        ratio(median(etcd->kill_ms), median(deltas->kill_ms)),
        ratio(median(etcd->add_ms), median(deltas->add_ms)));
  if (const MembershipRow* watch = usable("etcd"), *relay = usable("etcd-routers"); watch && relay)
    std::printf(
        "etcd, routers watching vs every instance watching: start %.2fx, start plc %.2fx, bytes/change "
        "%.2fx, "
        "etcd cpu/change %.2fx, kill p50 %.2fx, add p50 %.2fx\n",
        ratio(relay->start_converge_ms, watch->start_converge_ms),
        ratio(relay->start_placeable_ms, watch->start_placeable_ms),
        ratio(relay->bytes_per_change, watch->bytes_per_change),
        ratio(relay->registry_cpu_ms_per_change, watch->registry_cpu_ms_per_change),
        ratio(median(relay->kill_ms), median(watch->kill_ms)),
        ratio(median(relay->add_ms), median(watch->add_ms)));
  int failed = 0;
  for (const auto& r : rows) failed += r.failed + !r.error.empty();
  return failed == 0 ? 0 : 1;
}

}  // namespace epd::bench

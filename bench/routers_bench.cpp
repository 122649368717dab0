#include "routers_bench.hpp"

#include <signal.h>
#include <unistd.h>

#include <httplib.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "epd/etcd/etcd_client.hpp"
#include "epd/launcher/process_group.hpp"
#include "epd/launcher/role_command.hpp"
#include "host_load.hpp"
#include "local_etcd_run.hpp"
#include "stats.hpp"

namespace epd::bench {
namespace {

namespace fs = std::filesystem;
using clock = std::chrono::steady_clock;
using nlohmann::json;
using std::chrono::milliseconds;

struct Options {
  int reps = 5;
  int seconds = 8;  // per throughput run
  int rounds = 2;   // of one router then two, alternating: the host's load drifts between runs
  int clients = 4;
  int max_tokens = 16;
  milliseconds interval{500};  // heartbeat_interval_ms (the clusters' default), x 3 misses
  milliseconds lease_ttl{2000};
};

// Polls `pred` every 10 ms; the ms it took from `since`, nullopt after `limit`.
std::optional<double> wait_ms(clock::time_point since, milliseconds limit,
                              const std::function<bool()>& pred) {
  while (clock::now() - since < limit) {
    if (pred()) return ms_since(since);
    std::this_thread::sleep_for(milliseconds(10));
  }
  return std::nullopt;
}

fs::path bin_dir() {
  std::error_code ec;
  return fs::read_symlink("/proc/self/exe", ec).parent_path();
}

// One cluster of real role processes from a config written for it: 1 router with the embedded registry, or
// 2 routers over etcd (which it starts). Instance `decode-x` is in the config but started and killed by the
// bench. Everything stops (process groups: SIGTERM, then SIGKILL) when it goes.
class RouterCluster {
 public:
  RouterCluster(const Options& opt, bool etcd) : opt_(opt), etcd_mode_(etcd) {
    std::string tmpl = (fs::temp_directory_path() / "epd-bench-routers-XXXXXX").string();
    if (::mkdtemp(tmpl.data())) dir_ = tmpl;
  }
  ~RouterCluster() {
    stop_extra();
    if (group_) group_->stop();
    group_.reset();
    etcd_.reset();
    std::error_code ec;
    if (!dir_.empty()) fs::remove_all(dir_, ec);
  }

  const std::vector<int>& http_ports() const { return http_; }

  bool start() {
    if (dir_.empty()) return false;
    if (etcd_mode_) {
      etcd_ = std::make_unique<LocalEtcdRun>();
      if (!etcd_->start()) return false;
      auto c = etcd::EtcdClient::create({{etcd_->client().text()}, milliseconds(2000)});
      if (!c) return false;
      etcd_client_ = std::make_unique<etcd::EtcdClient>(std::move(*c));
    }
    write_config();
    std::vector<launcher::ChildSpec> specs;
    for (const auto& [id, role] : base_)
      if (auto cmd = launcher::role_command(bin_dir(), role, config_, id); cmd) {
        specs.push_back({id, *cmd});
      } else {
        std::fprintf(stderr, "routers bench: %s\n", cmd.error().detail.c_str());
        return false;
      }
    group_ = make_group();
    if (auto st = group_->start(std::move(specs)); !st) {
      std::fprintf(stderr, "routers bench: %s\n", st.error().to_string().c_str());
      return false;
    }
    std::vector<std::string> ids;
    for (const auto& [id, _] : base_) ids.push_back(id);
    if (!wait_ms(clock::now(), std::chrono::seconds(30), [&] {
          for (const auto& id : ids)
            if (!healthy_everywhere(id)) return false;
          return true;
        })) {
      std::fprintf(stderr, "routers bench: the %s cluster did not become ready in 30 s:\n%s",
                   etcd_mode_ ? "etcd" : "embedded", sink_->text().c_str());
      return false;
    }
    return true;
  }

  // Starts decode-x; false if it cannot be started.
  bool start_extra() {
    auto cmd = launcher::role_command(bin_dir(), "decode", config_, "decode-x");
    if (!cmd) return false;
    extra_ = make_group();
    return bool(extra_->start({{"decode-x", *cmd}}));
  }
  void kill_extra() {
    if (auto s = extra_ ? extra_->status("decode-x") : std::nullopt; s && s->pid > 0) ::kill(s->pid, SIGKILL);
  }
  void stop_extra() {
    if (extra_) extra_->stop();
    extra_.reset();
  }

  // /v1/instances of one router (empty when it does not answer).
  json instances(int port) const {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(1, 0);
    c.set_read_timeout(2, 0);
    auto r = c.Get("/v1/instances");
    if (!r || r->status != 200) return json::array();
    auto j = json::parse(r->body, nullptr, false);
    return j.is_array() ? j : json::array();
  }
  std::optional<json> entry(int port, const std::string& id) const {
    for (const auto& e : instances(port))
      if (e.value("id", "") == id) return e;
    return std::nullopt;
  }
  bool healthy_everywhere(const std::string& id) const {
    for (int p : http_)
      if (auto e = entry(p, id); !e || !e->value("healthy", false)) return false;
    return true;
  }
  bool unhealthy_everywhere(const std::string& id) const {
    for (int p : http_)
      if (auto e = entry(p, id); e && e->value("healthy", false)) return false;
    return true;
  }
  bool unlisted_everywhere(const std::string& id) const {
    for (int p : http_)
      if (entry(p, id)) return false;
    return true;
  }
  // etcd only: the instance's record is gone from etcd.
  bool record_gone(const std::string& id) const {
    if (!etcd_client_) return true;
    auto r = etcd_client_->range_prefix(prefix_ + "instances/" + id);
    return r && r->kvs.empty();
  }
  bool etcd_mode() const { return etcd_mode_; }
  std::string logs() const { return sink_->text(); }

 private:
  std::unique_ptr<launcher::ProcessGroup> make_group() const {
    launcher::GroupOptions o;
    o.restart.enabled = false;
    o.stop_grace = milliseconds(3000);
    return std::make_unique<launcher::ProcessGroup>(o, sink_);
  }

  void write_config() {
    config_ = dir_ / "cluster.toml";
    std::ostringstream c;
    c << "[cluster]\nname = \"bench-routers\"\n";
    if (etcd_mode_)
      c << "registry = \"etcd\"\netcd_endpoints = [\"" << etcd_->client().text() << "\"]\netcd_prefix = \""
        << prefix_ << "\"\netcd_lease_ttl_ms = " << opt_.lease_ttl.count() << "\n";
    else
      c << "registry = \"router-0\"\n";
    c << "heartbeat_interval_ms = " << opt_.interval.count()
      << "\nheartbeat_misses = 3\nrequest_timeout_ms = 60000\nmax_attempts = 3\n\n"
      << "[model]\npreset = \"tiny\"\n\n[transport]\nbackend = \"auto\"\nhost = \"127.0.0.1\"\n\n"
      << "[defaults.prefill]\nkv_pages = 512\n\n[defaults.decode]\nkv_pages = 512\nmax_batch = 16\n\n";
    const int routers = etcd_mode_ ? 2 : 1;
    for (int r = 0; r < routers; ++r) base_.emplace_back("router-" + std::to_string(r), "router");
    base_.emplace_back("encoder-0", "encoder");
    base_.emplace_back("prefill-0", "prefill");
    base_.emplace_back("decode-0", "decode");
    auto all = base_;
    all.emplace_back("decode-x", "decode");
    for (const auto& [id, role] : all) {
      c << "[[instance]]\nid = \"" << id << "\"\nrole = \"" << role
        << "\"\ncontrol = \"tcp://127.0.0.1:" << free_port() << "\"\n";
      if (role == "router") {
        http_.push_back(free_port());
        c << "http = \"127.0.0.1:" << http_.back() << "\"\n";
      }
      c << "\n";
    }
    std::ofstream(config_) << c.str();
  }

  Options opt_;
  bool etcd_mode_;
  const std::string prefix_ = "/epd/bench-routers/";
  fs::path dir_, config_;
  std::vector<std::pair<std::string, std::string>> base_;  // id, role: started with the cluster
  std::vector<int> http_;
  std::shared_ptr<TailSink> sink_ = std::make_shared<TailSink>();
  std::unique_ptr<LocalEtcdRun> etcd_;
  std::unique_ptr<etcd::EtcdClient> etcd_client_;
  std::unique_ptr<launcher::ProcessGroup> group_, extra_;
};

struct Churn {
  std::vector<double> start_ms, routed_ms, unlisted_ms, gone_ms;
  int failed = 0;
};

// `reps` times: start decode-x until every router would place on it (listed healthy by each); kill -9 it
// until no router would (unhealthy everywhere: its heartbeats went silent, or its connection broke), until
// no router lists it, and until its etcd record is gone.
Churn churn(RouterCluster& c, const Options& opt) {
  Churn out;
  const milliseconds limit = std::chrono::seconds(20);
  for (int rep = 0; rep < opt.reps; ++rep) {
    const auto t0 = clock::now();
    if (!c.start_extra()) {
      ++out.failed;
      break;
    }
    auto placed = wait_ms(t0, limit, [&] { return c.healthy_everywhere("decode-x"); });
    if (!placed) {
      std::fprintf(stderr, "routers bench: decode-x never placeable by every router\n%s", c.logs().c_str());
      ++out.failed;
      c.stop_extra();
      continue;
    }
    out.start_ms.push_back(*placed);
    // A running instance, not a new one; the kill falls at another point of its lease renewal period
    // (TTL/3) on every rep, so the lease expiry is sampled over that period, not at one phase of it.
    std::this_thread::sleep_for(milliseconds(500) + opt.lease_ttl / 3 * rep / opt.reps);
    const auto t1 = clock::now();
    c.kill_extra();
    std::optional<double> routed, unlisted, gone;
    wait_ms(t1, limit, [&] {
      if (!routed && c.unhealthy_everywhere("decode-x")) routed = ms_since(t1);
      if (!unlisted && c.unlisted_everywhere("decode-x")) unlisted = ms_since(t1);
      if (!gone && c.etcd_mode() && c.record_gone("decode-x")) gone = ms_since(t1);
      return routed && unlisted && (gone || !c.etcd_mode());
    });
    if (routed) out.routed_ms.push_back(*routed);
    if (unlisted) out.unlisted_ms.push_back(*unlisted);
    if (gone) out.gone_ms.push_back(*gone);
    if (!routed || !unlisted || (c.etcd_mode() && !gone)) ++out.failed;
    c.stop_extra();  // reaps it
  }
  return out;
}

struct Throughput {
  int completed = 0, failed = 0;
  double seconds = 0;
  double rps() const { return seconds > 0 ? completed / seconds : 0; }
};

// `clients` threads, spread round-robin over `ports`, each sending one request after the other for
// `seconds`.
Throughput load(const std::vector<int>& ports, const Options& opt) {
  std::atomic<int> completed{0}, failed{0};
  const auto t0 = clock::now();
  const auto until = t0 + std::chrono::seconds(opt.seconds);
  std::vector<std::thread> threads;
  for (int t = 0; t < opt.clients; ++t)
    threads.emplace_back([&, t] {
      httplib::Client c("127.0.0.1", ports[size_t(t) % ports.size()]);
      c.set_read_timeout(60, 0);
      for (int i = 0; clock::now() < until; ++i) {
        std::string prompt;
        for (int k = 0; k < 48; ++k) prompt.push_back(char('a' + (t * 7 + i * 5 + k * 3) % 26));
        json req{{"prompt", prompt}, {"max_tokens", opt.max_tokens}};
        auto r = c.Post("/v1/generate", req.dump(), "application/json");
        if (r && r->status == 200)
          ++completed;
        else
          ++failed;
      }
    });
  for (auto& t : threads) t.join();
  return {completed.load(), failed.load(), std::chrono::duration<double>(clock::now() - t0).count()};
}

double p50(std::vector<double> v) {
  return v.empty() ? 0 : percentile(v, 50);
}

void print_churn(const char* name, const Churn& c) {
  std::printf("%-22s %10.0f %10.0f %10.0f %10.0f %10.0f %10.0f", name, p50(c.start_ms), max_of(c.start_ms),
              p50(c.routed_ms), max_of(c.routed_ms), p50(c.unlisted_ms), max_of(c.unlisted_ms));
  if (c.gone_ms.empty())
    std::printf(" %10s %10s", "-", "-");
  else
    std::printf(" %10.0f %10.0f", p50(c.gone_ms), max_of(c.gone_ms));
  std::printf(" %6d\n", c.failed);
}

}  // namespace

int run_routers_cli(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto number = [&](int& out) {
      if (i + 1 >= argc) return false;
      try {
        out = std::stoi(argv[++i]);
        return true;
      } catch (const std::exception&) {
        return false;
      }
    };
    int v = 0;
    if (a == "--quick") {
      opt.reps = 2;
      opt.seconds = 3;
      opt.rounds = 1;
    } else if (a == "--reps" && number(v) && v >= 1) {
      opt.reps = v;
    } else if (a == "--seconds" && number(v) && v >= 1) {
      opt.seconds = v;
    } else if (a == "--rounds" && number(v) && v >= 1) {
      opt.rounds = v;
    } else if (a == "--clients" && number(v) && v >= 2) {
      opt.clients = v;
    } else if (a == "--interval-ms" && number(v) && v >= 50) {
      opt.interval = milliseconds(v);
    } else {
      std::fprintf(stderr,
                   "usage: epd-bench routers [--reps 5] [--seconds 8] [--rounds 2] [--clients 4 (>= 2)] "
                   "[--interval-ms 500] [--quick (2 reps, 3 s, 1 round)]\n");
      return 2;
    }
  }
  std::printf(
      "routers: real role processes (tiny model); heartbeat %lld ms x 3, etcd lease TTL %lld ms; %d reps of "
      "start + kill -9 of a decode; %d rounds of %d clients for %d s through one router, then two; load "
      "average %s\n",
      (long long)opt.interval.count(), (long long)opt.lease_ttl.count(), opt.reps, opt.rounds, opt.clients,
      opt.seconds, load_average().c_str());
  std::fflush(stdout);

  Churn embedded_churn, etcd_churn;
  std::vector<Throughput> one, two;
  {
    RouterCluster c(opt, false);
    if (!c.start()) return 1;
    embedded_churn = churn(c, opt);
  }
  {
    RouterCluster c(opt, true);
    if (!c.start()) return 1;
    etcd_churn = churn(c, opt);
    const auto& ports = c.http_ports();
    for (int r = 0; r < opt.rounds; ++r) {
      one.push_back(load({ports[0]}, opt));
      two.push_back(load(ports, opt));
    }
  }

  std::printf("\n%-22s %10s %10s %10s %10s %10s %10s %10s %10s %6s\n", "membership", "start p50", "start max",
              "routed p50", "routed max", "unlist p50", "unlist max", "gone p50", "gone max", "fail");
  print_churn("embedded, 1 router", embedded_churn);
  print_churn("etcd, 2 routers", etcd_churn);
  std::printf(
      "(ms. start: from starting the decode process until every router lists it healthy; routed: from its "
      "kill -9 until every router lists it unhealthy or not at all; unlist: until no router lists it; gone: "
      "until its record is gone from etcd - its lease expired)\n");
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  std::printf("etcd vs embedded: start p50 %.2fx, routed p50 %.2fx, unlist p50 %.2fx\n",
              ratio(p50(etcd_churn.start_ms), p50(embedded_churn.start_ms)),
              ratio(p50(etcd_churn.routed_ms), p50(embedded_churn.routed_ms)),
              ratio(p50(etcd_churn.unlisted_ms), p50(embedded_churn.unlisted_ms)));

  std::printf("\n%-22s %6s %10s %10s %10s\n", "etcd cluster", "round", "completed", "failed", "req/s");
  int failed = embedded_churn.failed + etcd_churn.failed, completed_one = 0, completed_two = 0;
  double secs_one = 0, secs_two = 0;
  for (int r = 0; r < opt.rounds; ++r) {
    std::printf("%-22s %6d %10d %10d %10.2f\n", "through 1 router", r + 1, one[size_t(r)].completed,
                one[size_t(r)].failed, one[size_t(r)].rps());
    std::printf("%-22s %6d %10d %10d %10.2f\n", "through 2 routers", r + 1, two[size_t(r)].completed,
                two[size_t(r)].failed, two[size_t(r)].rps());
    failed += one[size_t(r)].failed + two[size_t(r)].failed;
    completed_one += one[size_t(r)].completed;
    completed_two += two[size_t(r)].completed;
    secs_one += one[size_t(r)].seconds;
    secs_two += two[size_t(r)].seconds;
  }
  std::printf(
      "two routers vs one: %.2fx requests/s over all rounds (%d clients in both, max_tokens %d; one encoder, "
      "prefill and decode serve both); load average %s\n",
      ratio(completed_two / secs_two, completed_one / secs_one), opt.clients, opt.max_tokens,
      load_average().c_str());
  return failed == 0 && completed_one > 0 && completed_two > 0 ? 0 : 1;
}

}  // namespace epd::bench

// epd-cluster: starts every instance of a cluster config as a child process, prefixes their output with
// the instance id, waits until the router (every router, with membership in etcd) lists them all as
// healthy, restarts the ones that die, restarts them one at a time on SIGHUP (a rolling restart), and stops
// them all on SIGINT/SIGTERM. With `[etcd] local = true`
// it first starts a single-member etcd and stops it last. The work is done by epd::launcher; this file
// wires config to it.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "epd/config/cluster_config.hpp"
#include "epd/etcd/local_etcd.hpp"
#include "epd/launcher/exit_status.hpp"
#include "epd/launcher/process_group.hpp"
#include "epd/launcher/readiness.hpp"
#include "epd/launcher/role_command.hpp"
#include "epd/launcher/rolling_restart.hpp"

namespace {

namespace fs = std::filesystem;
namespace lc = epd::launcher;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// If we were started with 0/1/2 closed, our own pipes would get those numbers and be mistaken for them.
void ensure_std_fds_open() {
  for (int fd = 0; fd <= 2; ++fd)
    if (fcntl(fd, F_GETFD) < 0) {
      int n = open("/dev/null", O_RDWR);
      if (n >= 0 && n != fd) {
        dup2(n, fd);
        close(n);
      }
    }
}

// SIGINT/SIGTERM stay blocked in every thread and are taken synchronously here.
int wait_for_stop_signal(const sigset_t& set, milliseconds timeout) {
  timespec ts{time_t(timeout.count() / 1000), long(timeout.count() % 1000) * 1000000L};
  int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

milliseconds seconds_flag(double s) {
  return milliseconds(static_cast<long long>(std::llround(s * 1000)));
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  ensure_std_fds_open();
  // Before any thread exists, so every thread inherits the mask (children get a clean one).
  sigset_t stop_set;
  sigemptyset(&stop_set);
  sigaddset(&stop_set, SIGINT);
  sigaddset(&stop_set, SIGTERM);
  // SIGHUP asks for a rolling restart; it waits (pending) until the cluster is ready.
  sigset_t run_set = stop_set;
  sigaddset(&run_set, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &run_set, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a closed stdout must not kill the launcher (and with it the cluster)

  CLI::App app{"Start every instance of an epd cluster config as a child process."};
  std::string config_arg, bin_dir_arg;
  double ready_timeout_s = 30, stop_grace_s = 5;
  bool no_restart = false;
  app.add_option("--config", config_arg, "cluster config file (TOML)")->required();
  app.add_option("--bin-dir", bin_dir_arg, "directory holding epd-<role> (default: where epd-cluster is)");
  app.add_option(
         "--ready-timeout", ready_timeout_s,
         "seconds to wait until every instance is registered and healthy; 0 = do not wait (default 30)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--stop-grace", stop_grace_s, "seconds between SIGTERM and SIGKILL on stop (default 5)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--no-restart", no_restart, "do not restart instances that exit");
  std::string ready_ca;
  app.add_option("--ready-ca", ready_ca,
                 "PEM file of the CA that signed the routers' TLS certificates, for the readiness probe "
                 "(default: each router's own tls_cert, which suits a self-signed one)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is fine; usage errors share the config-error status
  }

  std::error_code ec;
  fs::path config_file = fs::absolute(config_arg, ec);
  auto cfg = epd::config::load_cluster_config(config_file);
  if (!cfg) {
    std::fprintf(stderr, "epd-cluster: %s\n", cfg.error().detail.c_str());
    return 2;
  }
  fs::path bin_dir = bin_dir_arg.empty() ? fs::read_symlink("/proc/self/exe", ec).parent_path()
                                         : fs::absolute(bin_dir_arg, ec);

  // Resolve every command before starting anything: a missing executable fails fast and clean.
  std::vector<lc::ChildSpec> specs;
  std::vector<std::string> ids;
  const auto* registry = cfg->registry();  // null with membership in etcd
  // The registry first: the others say HELLO to it.
  std::vector<const epd::config::InstanceConfig*> order;
  if (registry) order.push_back(registry);
  for (const auto& inst : cfg->instances)
    if (&inst != registry) order.push_back(&inst);
  for (const auto* inst : order) {
    auto cmd = lc::role_command(bin_dir, inst->role, config_file, inst->id);
    if (!cmd) {
      std::fprintf(stderr, "epd-cluster: %s\n", cmd.error().detail.c_str());
      return 2;
    }
    specs.push_back({inst->id, std::move(*cmd)});
    ids.push_back(inst->id);
  }

  // Readiness asks the router's HTTP API: the registry's own `http` key, else the first router's. With
  // membership in etcd every router keeps its own view, so every router with an `http` key is asked.
  std::optional<lc::HostPort> router_http;
  std::vector<lc::HostPort> more_routers;
  if (ready_timeout_s > 0) {
    std::vector<const epd::config::InstanceConfig*> candidates;
    if (registry) candidates.push_back(registry);
    for (const auto* r : cfg->with_role("router")) candidates.push_back(r);
    for (const auto* c : candidates) {
      auto http = c->settings.get_string("http", "");
      if (!http) {
        std::fprintf(stderr, "epd-cluster: %s\n", http.error().detail.c_str());
        return 2;
      }
      if (http->empty()) continue;
      auto hp = lc::parse_host_port(*http);
      if (!hp) {
        std::fprintf(stderr, "epd-cluster: %s: instance '%s' key 'http': %s\n", config_file.c_str(),
                     c->id.c_str(), hp.error().detail.c_str());
        return 2;
      }
      // A secured router lets the probe in as it lets clients in: with a key of its own api_keys_file, over
      // TLS verified against its certificate (or --ready-ca). Paths are relative to the cluster file.
      auto relative = [&](const std::string& path) {
        fs::path p(path);
        return p.is_relative() ? config_file.parent_path() / p : p;
      };
      auto keys = c->settings.get_string("api_keys_file", "");
      auto cert = c->settings.get_string("tls_cert", "");
      for (const auto* setting : {&keys, &cert})
        if (!*setting) {
          std::fprintf(stderr, "epd-cluster: %s\n", setting->error().detail.c_str());
          return 2;
        }
      if (!keys->empty()) {
        auto key = lc::first_api_key(relative(*keys));
        if (!key) {
          std::fprintf(stderr, "epd-cluster: instance '%s': %s\n", c->id.c_str(), key.error().detail.c_str());
          return 2;
        }
        hp->api_key = *key;
      }
      if (!cert->empty()) hp->ca_file = ready_ca.empty() ? relative(*cert).string() : ready_ca;
      if (!router_http) {
        router_http = *hp;
        if (!cfg->uses_etcd()) break;
      } else {
        more_routers.push_back(*hp);
      }
    }
    if (!router_http) {
      std::fprintf(stderr,
                   "epd-cluster: %s: no router instance has an `http` key, so readiness cannot be checked "
                   "(add one, or pass --ready-timeout 0)\n",
                   config_file.c_str());
      return 2;
    }
  }

  auto sink = std::make_shared<lc::FdSink>(1);
  // [etcd] local = true: a single-member etcd, up and serving before any instance starts, stopped after
  // them all (its own group is destroyed last). Its data lives in a temporary directory unless data_dir.
  struct TempDir {
    fs::path path;
    ~TempDir() {
      std::error_code ec;
      if (!path.empty()) fs::remove_all(path, ec);
    }
  } etcd_temp;  // removed after etcd_group (declared after it) stopped etcd
  std::unique_ptr<lc::ProcessGroup> etcd_group;
  if (cfg->etcd.local) {
    epd::etcd::LocalEtcd local;
    auto client = epd::etcd::parse_endpoint(cfg->cluster.etcd_endpoints.front());
    if (!client) {
      std::fprintf(stderr, "epd-cluster: %s\n", client.error().detail.c_str());
      return 2;
    }
    local.client = *client;
    local.peer = {cfg->etcd.peer.host, cfg->etcd.peer.port};
    local.name = cfg->cluster.name;
    if (cfg->etcd.data_dir.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "epd-etcd-XXXXXX").string();
      if (!::mkdtemp(tmpl.data())) {
        std::fprintf(stderr, "epd-cluster: cannot create a temporary directory for etcd\n");
        return 1;
      }
      etcd_temp.path = tmpl;
      local.data_dir = etcd_temp.path / "data";
    } else {
      local.data_dir = cfg->etcd.data_dir;
    }
    auto child = epd::etcd::local_etcd_child(local);
    if (!child) {
      std::fprintf(stderr, "epd-cluster: %s\n", child.error().detail.c_str());
      return 2;
    }
    lc::GroupOptions eopts;
    eopts.stop_grace = milliseconds(3000);
    etcd_group = std::make_unique<lc::ProcessGroup>(eopts, sink);
    if (auto st = etcd_group->start({*child}); !st) {
      sink->write_line("epd-cluster: " + st.error().detail);
      return 1;
    }
    if (auto st = epd::etcd::wait_healthy(local.client, milliseconds(20000)); !st) {
      sink->write_line("epd-cluster: " + st.error().detail + "; stopping");
      return 1;
    }
    sink->write_line("epd-cluster: local etcd serving on " + local.client.text() + " (data in " +
                     local.data_dir.string() + ")");
  }
  lc::GroupOptions opts;
  opts.stop_grace = seconds_flag(stop_grace_s);
  opts.restart.enabled = !no_restart;
  int rc = 0;
  {
    lc::ProcessGroup group(opts, sink);
    if (auto st = group.start(specs); !st) {
      sink->write_line("epd-cluster: " + st.error().detail);
      return 1;
    }
    auto stop_with = [&](int sig) {
      sink->write_line(std::string("epd-cluster: received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") +
                       "; stopping");
      group.stop();
      return 0;
    };

    // Wait for readiness; a stop signal or a child that gave up ends the wait early.
    if (router_http) {
      auto begin = Clock::now();
      auto deadline = begin + seconds_flag(ready_timeout_s);
      auto next_progress = begin + std::chrono::seconds(5);
      lc::Readiness last;
      for (;;) {
        if (int sig = wait_for_stop_signal(stop_set, milliseconds(0))) return stop_with(sig);
        for (const auto& s : group.status())
          if (s.state == lc::ChildState::gave_up) {
            sink->write_line("epd-cluster: " + s.id + " " + s.last_exit +
                             " before the cluster was ready; stopping");
            group.stop();
            return 1;
          }
        auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
        const auto probe_timeout = std::clamp(left, milliseconds(100), milliseconds(1000));
        last = lc::probe_instances(*router_http, ids, probe_timeout);
        for (const auto& r : more_routers) {
          if (!last.ready()) break;
          last = lc::probe_instances(r, ids, probe_timeout);  // every router must see every instance
        }
        if (last.ready()) break;
        if (last.refused) {  // a wrong key stays wrong: say so now, not as "not ready" after the timeout
          sink->write_line("epd-cluster: " + last.error + "; stopping");
          group.stop();
          return 1;
        }
        if (Clock::now() >= deadline) {
          std::string why = "epd-cluster: not ready after " +
                            lc::describe_ms(seconds_flag(ready_timeout_s).count()) +
                            "; missing: " + join(last.missing);
          if (!last.answered) why += " (" + last.error + ")";
          sink->write_line(why + "; stopping");
          group.stop();
          return 1;
        }
        if (Clock::now() >= next_progress) {
          sink->write_line("epd-cluster: waiting for: " + join(last.missing));
          next_progress += std::chrono::seconds(5);
        }
        if (int sig = wait_for_stop_signal(stop_set, milliseconds(100))) return stop_with(sig);
      }
      sink->write_line("epd-cluster: ready (" + std::to_string(ids.size()) + " instances)");
    } else {
      sink->write_line("epd-cluster: started (" + std::to_string(ids.size()) +
                       " instances; readiness not checked)");
    }

    // A rolling restart restarts every instance but the routers, one at a time (rolling_restart.hpp).
    std::vector<std::string> rolled;
    for (const auto* inst : order)
      if (inst->role != "router") rolled.push_back(inst->id);
    auto roll = [&] {
      if (!router_http) {
        sink->write_line(
            "epd-cluster: SIGHUP: a rolling restart needs a router's `http` key to see instances "
            "come back (and --ready-timeout > 0); not restarting");
        return;
      }
      sink->write_line("epd-cluster: received SIGHUP; restarting " + join(rolled) +
                       " one at a time (routers are not restarted: restart each alone, it drains)");
      lc::RollOptions ro;
      ro.routers.push_back(*router_http);
      ro.routers.insert(ro.routers.end(), more_routers.begin(), more_routers.end());
      ro.restart_timeout = opts.stop_grace + opts.kill_wait + std::chrono::seconds(5);
      ro.healthy_timeout = seconds_flag(ready_timeout_s);
      ro.cancelled = [&] {
        sigset_t pending;
        sigpending(&pending);
        return sigismember(&pending, SIGINT) == 1 || sigismember(&pending, SIGTERM) == 1;
      };
      if (auto st = lc::roll_instances(group, rolled, ro, *sink); !st)
        sink->write_line("epd-cluster: " + st.error().detail);
    };

    for (;;) {
      if (int sig = wait_for_stop_signal(run_set, milliseconds(200))) {
        if (sig == SIGHUP) {
          roll();
          continue;
        }
        rc = stop_with(sig);
        break;
      }
      if (group.alive() == 0) {
        sink->write_line("epd-cluster: every instance has stopped; exiting");
        group.stop();
        rc = 1;
        break;
      }
    }
  }
  return rc;
}

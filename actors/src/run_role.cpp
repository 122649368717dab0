#include "epd/actors/run_role.hpp"

#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <thread>

#include "epd/actors/build_identity.hpp"
#include "epd/actors/membership/etcd_membership.hpp"
#include "epd/actors/membership/membership.hpp"
#include "epd/actors/process_metrics.hpp"
#include "epd/actors/role_registry.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/actors/stop_signal.hpp"
#include "epd/http/metrics_endpoint.hpp"
#include "membership/registry.hpp"

namespace epd::actors {
namespace {

// A router holds a socket per client connection (thousands of streams); the usual soft limit of 1024 open
// files would refuse them long before the hard limit does. Raising the soft limit needs no privilege.
void raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  lim.rlim_cur = lim.rlim_max;
  if (setrlimit(RLIMIT_NOFILE, &lim) != 0) spdlog::warn("could not raise the open-file limit");
}

// An encoder, prefill or decode stopping: it says `draining` in its next heartbeats, so routers stop placing
// here within about an interval, and finishes every room it holds, those placed before the routers heard
// too. Returns once none is held after two intervals, or at the cluster's drain_timeout_ms. A role that can
// hand its rooms over (decode) does so then, and the drain waits up to kHandOverWait for them to be gone.
void drain_rooms(const RoleContext& ctx, const RoleHandle& handle, const std::string& id) {
  using clock = std::chrono::steady_clock;
  constexpr auto kHandOverWait = std::chrono::seconds(2);
  const auto& c = ctx.cluster->cluster;
  ctx.load->draining = true;
  const auto start = clock::now();
  const auto settle = 2 * c.heartbeat_interval;
  auto wait_until = [&](clock::time_point end) {
    while (clock::now() < end) {
      if (clock::now() - start >= settle && ctx.load->active_rooms.load() == 0) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  };
  wait_until(start + c.drain_timeout);
  auto ms = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(clock::now() - start).count();
  };
  uint32_t left = ctx.load->active_rooms.load();
  if (left > 0 && handle.hand_over) {
    spdlog::info("'{}' still holds {} rooms after {} ms: handing them over", id, left, ms());
    handle.hand_over();
    wait_until(clock::now() + kHandOverWait);
    if (ctx.load->active_rooms.load() == 0) {
      spdlog::info("'{}' drained in {} ms: {} rooms handed over", id, ms(), left);
      return;
    }
    left = ctx.load->active_rooms.load();
  }
  if (left > 0)
    spdlog::warn("'{}' drain timed out after {} ms with {} rooms held: they fail as the process stops", id,
                 ms(), left);
  else
    spdlog::info("'{}' drained in {} ms: no room held", id, ms());
}

int fail(const std::string& what) {
  spdlog::critical("{}", what);
  return 2;
}

// [security] metrics_*: the scrape keys are read now (a missing or open file stops the start, naming it);
// the TLS files when the endpoint starts.
protocol::Result<http::MetricsAccess> metrics_access_for(const config::SecuritySection& sec) {
  http::MetricsAccess access;
  if (!sec.metrics_keys_file.empty()) {
    auto keys = http::ApiKeys::load(sec.metrics_keys_file);
    if (!keys)
      return protocol::make_error(protocol::ErrorCode::config_error,
                                  "[security] metrics_keys_file: " + keys.error().detail);
    access.keys = std::make_shared<const http::ApiKeys>(std::move(*keys));
  }
  if (!sec.metrics_tls_cert.empty()) access.tls = http::TlsFiles{sec.metrics_tls_cert, sec.metrics_tls_key};
  return access;
}

}  // namespace

int run_role(int argc, char** argv, const char* fixed_role) {
  CLI::App app{fixed_role ? std::string("epd ") + fixed_role + " role" : "epd role runner"};
  std::string config_file, id, role_flag, log_level = "info";
  app.add_option("--config", config_file, "cluster config file (TOML)")->required();
  app.add_option("--id", id, "this instance's id in the config")->required();
  if (!fixed_role) app.add_option("--role", role_flag, "role to run (default: the instance's role)");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::from_str(log_level));
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");

  auto cfg = config::load_cluster_config(config_file);
  if (!cfg) return fail(cfg.error().detail);
  const config::InstanceConfig* inst = cfg->find(id);
  if (!inst) return fail(config_file + ": no instance with id '" + id + "'");
  const std::string role = fixed_role ? fixed_role : (role_flag.empty() ? inst->role : role_flag);
  if (inst->role != role)
    return fail("instance '" + id + "' has role '" + inst->role + "', this executable runs '" + role + "'");
  const RoleSpec* spec = builtin_roles().find(role);
  if (!spec) return fail("unknown role '" + role + "'");
  {
    std::vector<std::string_view> keys = spec->settings;
    if (spec->runs_model) keys.push_back("threads");
    if (auto st = inst->settings.only_keys(keys); !st) return fail(st.error().detail);
  }
  auto model = model_for(*cfg);
  if (!model) return fail("model: " + model.error().detail);
  // An instance's own compute threads (`threads` in its settings, else model.threads): on a small host
  // prefill may take two cores while decode keeps one. The results do not depend on it.
  auto threads = inst->settings.get_uint("threads", model->threads, 1, 256);
  if (!threads) return fail(threads.error().detail);
  model->threads = uint32_t(*threads);
  auto identity = local_identity(*model);
  if (!identity) return fail("model fingerprint: " + identity.error().detail);

  // Our threads keep SIGINT/SIGTERM blocked; the handler takes them wherever they land (stop_signal.hpp).
  block_stop_signals();
  if (auto st = install_stop_handler(); !st) return fail(st.error().detail);
  signal(SIGPIPE, SIG_IGN);
  raise_open_file_limit();

  const uint64_t incarnation = fresh_incarnation();
  std::unique_ptr<transport::Engine> engine;
  if (spec->needs_engine) {
    auto ec = config::engine_config_for(*inst);
    if (!ec) return fail(ec.error().detail);
    ec->incarnation = incarnation;
    auto e = transport::Engine::create(*ec);
    if (!e) return fail("transfer engine: " + e.error().to_string());
    engine = std::move(e.value());
  }
  // Bound before anything else runs: a metrics address that is taken is a config error, said at once.
  auto process_metrics = make_process_metrics(id, role);
  auto metrics_access = metrics_access_for(cfg->security);
  if (!metrics_access) return fail(metrics_access.error().detail);
  http::MetricsEndpoint metrics_endpoint([reg = process_metrics] { return reg->render(); },
                                         std::move(*metrics_access));
  if (inst->metrics) {
    auto bound = metrics_endpoint.start(inst->metrics->host, inst->metrics->port);
    if (!bound) return fail("metrics = \"" + inst->metrics->text() + "\": " + bound.error().detail);
    spdlog::info("{} '{}': metrics on {}://{}:{}/metrics{}", role, id,
                 metrics_endpoint.tls() ? "https" : "http", inst->metrics->host, *bound,
                 cfg->security.metrics_keys_file.empty() ? " (open: no [security] metrics_keys_file)" : "");
    process_metrics->on_scrape([refused = metrics_endpoint.unauthorized_counter()](metrics::Snapshot& s) {
      s.counter("epd_metrics_unauthorized_total",
                "Scrapes of this process's /metrics refused for a missing or wrong key",
                double(refused->load()));
    });
  }
  std::optional<transport::CurveConfig> curve;
  if (cfg->security.enabled()) {
    auto c = config::curve_config_for(*cfg, *inst);
    if (!c) return fail(c.error().detail);
    curve = std::move(c.value());
    spdlog::info("{} '{}': control plane authenticated and encrypted (CURVE), {} keys admitted", role, id,
                 curve->allowed.size());
  } else {
    spdlog::warn(
        "{} '{}': the control plane is unauthenticated (no [security] curve_keys): every address is "
        "loopback only",
        role, id);
  }
  LivenessConfig liveness{cfg->cluster.heartbeat_interval, cfg->cluster.heartbeat_misses,
                          role == protocol::kRouterRole};
  if (const auto* registry = cfg->registry()) liveness.router_endpoints.push_back(registry->control);
  auto bridge = Bridge::start(id, incarnation, inst->control, {}, std::move(liveness), std::move(curve));
  if (!bridge) return fail(bridge.error().detail);
  process_metrics->on_scrape([b = std::weak_ptr<Bridge>(bridge.value())](metrics::Snapshot& s) {
    if (auto live = b.lock())
      s.counter("epd_control_refused_peers_total",
                "Control connections or frames refused before decoding: unknown CURVE key, failed handshake, "
                "or a routing id that is not the key's",
                double(live->stats().refused_peers));
  });

  caf::actor_system_config sys_cfg;
  sys_cfg.set("scheduler.max-threads", 2);
  // Idle work-stealing workers poll; on a small host that CPU belongs to compute (docs/architecture.md).
  sys_cfg.set("scheduler.policy", caf::atom("sharing"));
  caf::actor_system system{sys_cfg};

  RoleContext ctx;
  ctx.system = &system;
  ctx.cluster = &cfg.value();
  ctx.instance = inst;
  ctx.bridge = bridge.value();
  ctx.engine = engine.get();
  ctx.model = model.value();
  ctx.metrics = process_metrics;
  export_load(*ctx.metrics, ctx.load, incarnation, engine.get());
  // One set of membership counters, shared by the registry (if hosted here) and the membership client.
  auto membership_metrics = std::make_shared<MembershipMetrics>(*ctx.metrics);
  spdlog::info("{} '{}': protocol {}, model {}", role, id, protocol::describe_protocol(*identity),
               protocol::describe_model(*identity));
  std::vector<caf::actor> actors;
  if (cfg->uses_etcd()) {
    // Membership in etcd: every router keeps its own view, filled by its etcd membership actor.
    if (role == protocol::kRouterRole) ctx.registry = std::make_shared<RegistryView>();
  } else if (cfg->cluster.registry == id) {
    ctx.registry = std::make_shared<RegistryView>();
    RegistryConfig rc;
    rc.heartbeat_interval = cfg->cluster.heartbeat_interval;
    rc.misses = cfg->cluster.heartbeat_misses;
    rc.identity = *identity;
    rc.metrics = membership_metrics;
    actors.push_back(spawn_registry(system, ctx.bridge, rc, ctx.registry));
  }
  auto handle = spec->spawn(ctx);
  if (!handle) {
    for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
    ctx.bridge->stop();
    return fail(handle.error().detail);
  }
  MembershipConfig mc;
  std::unique_ptr<EtcdMembership> etcd_membership;
  if (cfg->uses_etcd()) {
    EtcdMembershipConfig ec;
    ec.endpoints = cfg->cluster.etcd_endpoints;
    ec.prefix = cfg->cluster.etcd_prefix;
    ec.lease_ttl = cfg->cluster.etcd_lease_ttl;
    ec.routers_watch = cfg->cluster.etcd_routers_watch;
    ec.heartbeat_interval = cfg->cluster.heartbeat_interval;
    ec.heartbeat_misses = cfg->cluster.heartbeat_misses;
    ec.self.instance_id = id;
    ec.self.role = role;
    ec.self.control_endpoint = ctx.bridge->endpoint();
    ec.self.incarnation = incarnation;
    if (engine) ec.self.segment = engine->descriptor();
    ec.self.kv_layout = handle->kv_layout;
    ec.self.identity = *identity;
    ec.engine = engine.get();
    ec.metrics = membership_metrics;
    auto m = start_etcd_membership(system, ctx.bridge, std::move(ec), ctx.load, handle->main, ctx.registry);
    if (!m) {
      for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
      caf::anon_send_exit(handle->main, caf::exit_reason::user_shutdown);
      ctx.bridge->stop();
      return fail("etcd membership: " + m.error().detail);
    }
    etcd_membership = std::move(*m);
    std::string endpoints;
    for (const auto& e : cfg->cluster.etcd_endpoints) endpoints += (endpoints.empty() ? "" : ", ") + e;
    spdlog::info("{} '{}': membership in etcd ({}), prefix {}, lease TTL {} ms, {} watch", role, id,
                 endpoints, cfg->cluster.etcd_prefix, cfg->cluster.etcd_lease_ttl.count(),
                 cfg->cluster.etcd_routers_watch ? "routers" : "every instance");
  } else {
    mc.registry_endpoint = cfg->registry()->control;
    mc.role = role;
    mc.heartbeat_interval = cfg->cluster.heartbeat_interval;
    mc.heartbeat_misses = cfg->cluster.heartbeat_misses;
    mc.engine = engine.get();
    mc.kv_layout = handle->kv_layout;
    mc.kv_pages_total = handle->kv_pages_total;
    mc.metrics = membership_metrics;
    mc.identity = *identity;
    actors.push_back(spawn_membership(system, ctx.bridge, mc, ctx.load, handle->main));
  }
  ctx.bridge->wired();
  actors.push_back(handle->main);
  for (auto& a : handle->others) actors.push_back(a);
  spdlog::info("{} '{}' serving on {} (incarnation {})", role, id, ctx.bridge->endpoint(), incarnation);
  const int sig = wait_for_stop_signal();
  spdlog::info("{} '{}' stopping on signal {}", role, id, sig);
  if (handle->drain)
    handle->drain();
  else
    drain_rooms(ctx, *handle, id);
  metrics_endpoint.stop();
  // Leaving: etcd drops our record with the revoked lease; the embedded registry hears GOODBYE.
  if (etcd_membership)
    etcd_membership->stop();
  else
    ctx.bridge->send_to_endpoint(mc.registry_endpoint, protocol::Goodbye{"shutdown"});
  for (auto& a : actors) caf::anon_send_exit(a, caf::exit_reason::user_shutdown);
  ctx.bridge->stop();  // flushes the GOODBYE within linger
  system.await_all_actors_done();
  return 0;
}

}  // namespace epd::actors

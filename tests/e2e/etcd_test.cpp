// Membership in etcd (registry = "etcd") with two stateless routers, on real processes and a real etcd:
// answers through either router equal the colocated run; kill -9 of one router loses only the requests in
// flight on it; a killed decode's record goes with its lease and no router lists it; etcd frozen for 10 s
// under load fails no request, restarts nothing, and every record is back once etcd is.
#include <signal.h>

#include <httplib.h>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <set>
#include <thread>

#include "epd/etcd/etcd_client.hpp"
#include "etcd_server.hpp"
#include "load.hpp"
#include "workload.hpp"

using namespace epd;
using namespace epd::testing;
using namespace std::chrono_literals;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr int kLeaseTtlMs = 2000;
const std::string kPrefix = "/epd/e2e/instances/";

struct TwoRouters {
  int second_http = free_port();
  ClusterSpec spec;
  explicit TwoRouters(const EtcdServer& etcd, int decodes = 1) {
    spec.etcd_endpoints = {etcd.url()};
    spec.etcd_lease_ttl_ms = kLeaseTtlMs;
    spec.heartbeat_ms = 100;
    spec.heartbeat_misses = 10;  // 1 s of silence on a control connection: dead
    spec.decodes = decodes;
    spec.max_attempts = 4;
    spec.defaults["prefill"] = "bootstrap_timeout_ms = 3000\n";
    spec.extra_sections = "[[instance]]\nid = \"router-b\"\nrole = \"router\"\ncontrol = \"tcp://127.0.0.1:" +
                          std::to_string(free_port()) +
                          "\"\nhttp = \"127.0.0.1:" + std::to_string(second_http) + "\"\n";
    spec.extra_ids = {"router-b"};
  }
};

std::pair<int, json> generate_on(int port, const json& request) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(30, 0);
  auto r = c.Post("/v1/generate", request.dump(), "application/json");
  if (!r) return {0, json()};
  return {r->status, json::parse(r->body, nullptr, false)};
}

json instances_on(int port) {
  httplib::Client c("127.0.0.1", port);
  c.set_connection_timeout(1, 0);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/v1/instances");
  if (!r || r->status != 200) return json::array();
  return json::parse(r->body, nullptr, false);
}

std::set<std::string> healthy_ids(int port) {
  std::set<std::string> out;
  for (const auto& i : instances_on(port))
    if (i.value("healthy", false)) out.insert(i.value("id", ""));
  return out;
}

std::set<std::string> listed_ids(int port) {
  std::set<std::string> out;
  for (const auto& i : instances_on(port)) out.insert(i.value("id", ""));
  return out;
}

// Waits until `pred` holds (polling every 50 ms); the ms it took, or -1 after `timeout`.
int64_t wait_until(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  const auto t0 = clock_type::now();
  while (clock_type::now() - t0 < timeout) {
    if (pred()) return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
    std::this_thread::sleep_for(50ms);
  }
  return -1;
}

std::set<std::string> etcd_ids(const etcd::EtcdClient& c) {
  std::set<std::string> out;
  if (auto r = c.range_prefix(kPrefix))
    for (const auto& kv : r->kvs) out.insert(kv.key.substr(kPrefix.size()));
  return out;
}

etcd::EtcdClient client_of(const EtcdServer& server) {
  auto c = etcd::EtcdClient::create({{server.url()}, 2000ms});
  REQUIRE(c);
  return std::move(*c);
}

// Clients sending workload cases in a loop to one router until `stop`; every answer checked.
struct LoadLoop {
  int port;
  int clients;
  std::atomic<bool> stop{false};
  std::atomic<bool> router_gone{false};  // set when this router is killed: clients stop once they notice
  std::mutex mu;
  Outcome outcome;
  int refused = 0;  // no connection: sent after the router was gone (never in flight)
  std::vector<std::thread> threads;
  LoadLoop(int p, int n) : port(p), clients(n) {}
  void start() {
    const auto cases = workload(12);
    for (const auto& c : cases) oracle(c);
    for (int t = 0; t < clients; ++t)
      threads.emplace_back([this, cases, t] {
        for (size_t i = size_t(t); !stop.load(); i = (i + 1) % cases.size()) {
          const bool gone_before = router_gone.load();
          auto [status, body] = generate_on(port, request_of(cases[i]));
          std::lock_guard lock(mu);
          if (status == 0 && gone_before) {
            ++refused;
            return;  // the router was already dead when we sent: not a request it lost
          }
          outcome.add(oracle(cases[i]), status, body);
          if (status == 0) return;  // lost with the router; this client stops
        }
      });
  }
  void finish() {
    stop = true;
    for (auto& t : threads) t.join();
  }
  int answered() {
    std::lock_guard lock(mu);
    return outcome.completed + outcome.failed + outcome.lost + outcome.wrong;
  }
};

// etcd's count of watchers (its /metrics), -1 if it cannot be read.
double etcd_watchers(const EtcdServer& etcd) {
  httplib::Client c("127.0.0.1", etcd.client_port());
  c.set_read_timeout(5, 0);
  auto r = c.Get("/metrics");
  if (!r || r->status != 200) return -1;
  const std::string name = "\netcd_debugging_mvcc_watcher_total ";
  const auto at = r->body.find(name);
  return at == std::string::npos ? -1 : std::stod(r->body.substr(at + name.size()));
}

// `watch`: [cluster] etcd_watch ("" for the default, every instance watching).
void serve_through_two_routers_and_kill_one(const std::string& watch) {
  EtcdServer etcd;
  etcd.start();
  TwoRouters setup(etcd, 2);
  setup.spec.etcd_watch = watch;
  Cluster cluster(setup.spec);
  LogDump dump{cluster, "etcd-routers" + (watch.empty() ? "" : "-" + watch)};
  cluster.start();
  const std::set<std::string> all = {"router", "router-b", "encoder-0", "prefill-0", "decode-0", "decode-1"};
  REQUIRE(wait_until([&] { return healthy_ids(setup.second_http) == all; }, 20s) >= 0);
  auto client = client_of(etcd);
  CHECK(etcd_ids(client) == all);
  // Who watches etcd: every instance, or the two routers alone (they send the others RECORDS).
  CHECK(etcd_watchers(etcd) == (watch == "routers" ? 2 : double(all.size())));

  // Through either router: the colocated run's tokens.
  for (int port : {cluster.http_port(), setup.second_http}) {
    for (const auto& c : workload(6)) {
      auto [status, body] = generate_on(port, request_of(c));
      INFO("router port " << port << ": " << body.dump());
      REQUIRE(status == 200);
      CHECK(body["tokens"].get<std::vector<uint32_t>>() == oracle(c));
    }
  }

  // kill -9 of one router under load on both.
  LoadLoop on_a(cluster.http_port(), 3), on_b(setup.second_http, 3);
  on_a.start();
  on_b.start();
  REQUIRE(wait_until([&] { return on_a.answered() >= 6 && on_b.answered() >= 6; }, 30s) >= 0);
  const pid_t router_pid = cluster.pid("router");
  REQUIRE(router_pid > 0);
  on_a.router_gone = false;
  ::kill(router_pid, SIGKILL);
  on_a.router_gone = true;
  const int b_before = on_b.answered();
  REQUIRE(wait_until([&] { return on_b.answered() >= b_before + 20; }, 30s) >= 0);
  on_a.finish();
  on_b.finish();
  report("router-b while router was killed", on_b.outcome, json::object(), "etcd");
  report("router (killed)", on_a.outcome, json::object(), "etcd");
  std::printf(
      "[etcd] router kill: lost in flight on the killed router=%d (clients=%d), refused after=%d, "
      "completed on the survivor=%d, failed on the survivor=%d\n",
      on_a.outcome.lost, on_a.clients, on_a.refused, on_b.outcome.completed,
      on_b.outcome.failed + on_b.outcome.lost);
  CHECK(on_b.outcome.failed == 0);
  CHECK(on_b.outcome.lost == 0);
  CHECK(on_b.outcome.wrong == 0);
  CHECK(on_a.outcome.wrong == 0);
  CHECK(on_a.outcome.lost + on_a.outcome.failed <= on_a.clients);  // at most one in flight per client
  CHECK(on_a.outcome.completed >= 6);

  // The killed router's record goes with its lease; the survivor stops listing it.
  const int64_t router_gone_ms = wait_until([&] { return !etcd_ids(client).count("router"); }, 15s);
  CHECK(router_gone_ms >= 0);
  CHECK(wait_until([&] { return !listed_ids(setup.second_http).count("router"); }, 10s) >= 0);

  // kill -9 of a decode: its record goes once its lease expires, and no router lists it.
  const pid_t decode_pid = cluster.pid("decode-1");
  REQUIRE(decode_pid > 0);
  const auto killed_at = clock_type::now();
  ::kill(decode_pid, SIGKILL);
  const int64_t key_gone_ms = wait_until([&] { return !etcd_ids(client).count("decode-1"); }, 15s);
  const int64_t unlisted_ms =
      wait_until([&] { return !listed_ids(setup.second_http).count("decode-1"); }, 15s);
  const auto total_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - killed_at).count();
  std::printf(
      "[etcd] decode kill -9: record gone from etcd after %lld ms (lease TTL %d ms), unlisted by "
      "router-b %lld ms later (%lld ms after the kill)\n",
      (long long)key_gone_ms, kLeaseTtlMs, (long long)unlisted_ms, (long long)total_ms);
  REQUIRE(key_gone_ms >= 0);
  CHECK(key_gone_ms >= kLeaseTtlMs / 2);  // the lease, not a delete by someone: it outlives the kill a while
  REQUIRE(unlisted_ms >= 0);
  // The survivor keeps serving with the other decode.
  for (const auto& c : workload(4)) {
    auto [status, body] = generate_on(setup.second_http, request_of(c));
    INFO(body.dump());
    REQUIRE(status == 200);
    CHECK(body["tokens"].get<std::vector<uint32_t>>() == oracle(c));
  }
}

}  // namespace

TEST_CASE(
    "etcd membership: both routers answer like epd-run and a router kill loses only its in-flight "
    "requests") {
  serve_through_two_routers_and_kill_one("");
}

// The same with etcd_watch = "routers": the instances learn every record (the decode that another router
// placed, the kill of a router, the expiry of a killed decode's lease) from the routers' RECORDS alone.
TEST_CASE(
    "etcd membership with routers watching: both routers answer like epd-run and a router kill loses only "
    "its in-flight requests") {
  serve_through_two_routers_and_kill_one("routers");
}

TEST_CASE("etcd membership: etcd frozen for 10 s under load fails no request and restarts nothing") {
  EtcdServer etcd;
  etcd.start();
  TwoRouters setup(etcd);
  Cluster cluster(setup.spec);
  LogDump dump{cluster, "etcd-outage"};
  cluster.start();
  const std::set<std::string> all = {"router", "router-b", "encoder-0", "prefill-0", "decode-0"};
  REQUIRE(wait_until([&] { return healthy_ids(setup.second_http) == all; }, 20s) >= 0);
  std::map<std::string, uint64_t> incarnations;
  for (const auto& i : instances_on(setup.second_http))
    incarnations[i["id"]] = i["incarnation"].get<uint64_t>();
  std::map<std::string, pid_t> pids;
  for (const auto& id : all) pids[id] = cluster.pid(id);

  LoadLoop on_a(cluster.http_port(), 2), on_b(setup.second_http, 2);
  on_a.start();
  on_b.start();
  REQUIRE(wait_until([&] { return on_a.answered() >= 4 && on_b.answered() >= 4; }, 30s) >= 0);
  etcd.freeze();
  const int a0 = on_a.answered(), b0 = on_b.answered();
  std::this_thread::sleep_for(10s);
  const int during_a = on_a.answered() - a0, during_b = on_b.answered() - b0;
  etcd.thaw();
  const auto thawed = clock_type::now();
  auto client = client_of(etcd);
  // Every record is back in etcd (a lease that expired while etcd was frozen is granted anew).
  const int64_t back_ms = wait_until([&] { return etcd_ids(client) == all; }, 20s);
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseTtlMs + 500));  // past any grace period
  on_a.finish();
  on_b.finish();
  report("router during the etcd outage", on_a.outcome, json::object(), "etcd");
  report("router-b during the etcd outage", on_b.outcome, json::object(), "etcd");
  std::printf(
      "[etcd] outage 10 s: answered during the outage router=%d router-b=%d; every record back in "
      "etcd %lld ms after the thaw\n",
      during_a, during_b, (long long)back_ms);
  (void)thawed;
  CHECK(back_ms >= 0);
  CHECK(during_a > 0);
  CHECK(during_b > 0);
  for (auto* o : {&on_a.outcome, &on_b.outcome}) {
    CHECK(o->failed == 0);
    CHECK(o->lost == 0);
    CHECK(o->wrong == 0);
  }
  // Nobody restarted: same processes, same incarnations, still listed healthy by both routers.
  for (const auto& id : all) {
    INFO(id);
    CHECK(cluster.pid(id) == pids[id]);
    auto s = cluster.group().status(id);
    REQUIRE(s);
    CHECK(s->restarts == 0);
  }
  for (int port : {cluster.http_port(), setup.second_http}) {
    INFO("router port " << port);
    CHECK(wait_until([&] { return healthy_ids(port) == all; }, 10s) >= 0);
    for (const auto& i : instances_on(port)) CHECK(i["incarnation"].get<uint64_t>() == incarnations[i["id"]]);
  }
  CHECK(count_lines(cluster.logs(), "left (its etcd record is gone)") == 0);
}

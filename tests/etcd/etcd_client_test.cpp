// The etcd client against a real etcd: every call the membership backend makes, leases expiring, watches
// resuming and hitting compaction, and failover between endpoints.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "../common/no_free_descriptors.hpp"
#include "epd/etcd/etcd_client.hpp"
#include "etcd_server.hpp"

using namespace epd;
using namespace std::chrono_literals;
using etcd::EtcdClient;
using etcd::WatchEnd;
using etcd::WatchEvent;

namespace {

EtcdClient client_for(const std::vector<std::string>& urls, std::chrono::milliseconds timeout = 2000ms) {
  auto c = EtcdClient::create({urls, timeout});
  REQUIRE(c);
  return std::move(*c);
}

// A loopback URL where nothing listens.
std::string dead_url() {
  return "http://127.0.0.1:" + std::to_string(testing::free_port());
}

}  // namespace

TEST_CASE("etcd endpoints must be http HOST PORT") {
  CHECK(etcd::parse_endpoint("http://127.0.0.1:2379"));
  CHECK(etcd::parse_endpoint("http://etcd-0:2379/")->host == "etcd-0");
  for (auto bad : {"127.0.0.1:2379", "https://127.0.0.1:2379", "http://127.0.0.1", "http://h:0",
                   "http://h:70000", "http://h:2379/v3", "http://:2379"}) {
    INFO(bad);
    auto r = etcd::parse_endpoint(bad);
    REQUIRE_FALSE(r);
    CHECK(r.error().code == protocol::ErrorCode::config_error);
  }
  CHECK_FALSE(EtcdClient::create({{}, 1000ms}));
  CHECK(etcd::prefix_end("/epd/") == "/epd0");
  CHECK(etcd::prefix_end(std::string("a\xff", 2)) == "b");
}

TEST_CASE("etcd put range and erase keep binary values and list a prefix only") {
  testing::EtcdServer server;
  server.start();
  auto c = client_for({server.url()});
  const std::string binary("\x00\x01\xff msgpack\n", 12);
  auto r1 = c.put("/t/instances/a", binary);
  REQUIRE(r1);
  auto r2 = c.put("/t/instances/b", "bee");
  REQUIRE(r2);
  CHECK(*r2 > *r1);
  REQUIRE(c.put("/t/other", "not listed"));
  REQUIRE(c.put("/t/instances0", "past the prefix"));
  auto listed = c.range_prefix("/t/instances/");
  REQUIRE(listed);
  REQUIRE(listed->kvs.size() == 2);
  CHECK(listed->kvs[0].key == "/t/instances/a");
  CHECK(listed->kvs[0].value == binary);
  CHECK(listed->kvs[1].value == "bee");
  CHECK(listed->kvs[1].mod_revision == *r2);
  CHECK(listed->revision >= *r2 + 2);
  REQUIRE(c.erase("/t/instances/a"));
  listed = c.range_prefix("/t/instances/");
  REQUIRE(listed);
  REQUIRE(listed->kvs.size() == 1);
  CHECK(listed->kvs[0].key == "/t/instances/b");
}

TEST_CASE("etcd lease keeps its key alive until it is no longer renewed") {
  testing::EtcdServer server;
  server.start();
  auto c = client_for({server.url()});
  auto lease = c.grant(2s);
  REQUIRE(lease);
  CHECK(lease->ttl_s == 2);
  REQUIRE(c.put("/t/instances/x", "x", lease->id));
  // Renewed for longer than its TTL: still there.
  for (int i = 0; i < 6; ++i) {
    auto left = c.keep_alive(lease->id);
    REQUIRE(left);
    CHECK(*left == 2);
    std::this_thread::sleep_for(500ms);
  }
  REQUIRE(c.range_prefix("/t/instances/")->kvs.size() == 1);
  CHECK(c.range_prefix("/t/instances/")->kvs[0].lease == lease->id);
  // Not renewed: etcd deletes the key once the lease expires, and the lease is unknown from then on.
  const auto begin = std::chrono::steady_clock::now();
  while (!c.range_prefix("/t/instances/")->kvs.empty() && std::chrono::steady_clock::now() - begin < 10s)
    std::this_thread::sleep_for(100ms);
  CHECK(c.range_prefix("/t/instances/")->kvs.empty());
  auto left = c.keep_alive(lease->id);
  REQUIRE(left);
  CHECK(*left == 0);
  // A revoked lease takes its key with it at once.
  auto l2 = c.grant(30s);
  REQUIRE(l2);
  REQUIRE(c.put("/t/instances/y", "y", l2->id));
  REQUIRE(c.revoke(l2->id));
  CHECK(c.range_prefix("/t/instances/")->kvs.empty());
}

TEST_CASE("etcd watch streams puts and deletes and resumes from a revision") {
  testing::EtcdServer server;
  server.start();
  auto c = client_for({server.url()});
  auto start = c.range_prefix("/w/");
  REQUIRE(start);
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::vector<WatchEvent> seen;
  int64_t last_rev = 0;
  std::thread watcher([&] {
    auto end = c.watch_prefix(
        "/w/", start->revision + 1,
        [&](std::vector<WatchEvent> evs, int64_t rev) {
          std::lock_guard lock(mu);
          for (auto& e : evs) seen.push_back(std::move(e));
          last_rev = rev;
        },
        stop, 30s);
    CHECK(end.why == WatchEnd::Why::stopped);
  });
  std::this_thread::sleep_for(300ms);
  REQUIRE(c.put("/w/a", "1"));
  REQUIRE(c.put("/elsewhere", "not watched"));
  REQUIRE(c.put("/w/a", "2"));
  auto del_rev = c.erase("/w/a");
  REQUIRE(del_rev);
  const auto begin = std::chrono::steady_clock::now();
  for (;;) {
    {
      std::lock_guard lock(mu);
      if (seen.size() >= 3 || std::chrono::steady_clock::now() - begin > 10s) break;
    }
    std::this_thread::sleep_for(50ms);
  }
  const auto stop_at = std::chrono::steady_clock::now();
  stop = true;
  watcher.join();
  CHECK(std::chrono::steady_clock::now() - stop_at < 1s);  // stop is honoured between reads
  REQUIRE(seen.size() == 3);
  CHECK(seen[0].type == WatchEvent::Type::put);
  CHECK(seen[0].kv.value == "1");
  CHECK(seen[1].kv.value == "2");
  CHECK(seen[2].type == WatchEvent::Type::del);
  CHECK(seen[2].kv.key == "/w/a");
  CHECK(last_rev == *del_rev);

  // Resuming from an old revision replays what happened since; a compacted one says so.
  std::vector<WatchEvent> replay;
  std::atomic<bool> stop2{false};
  auto end = c.watch_prefix(
      "/w/", start->revision + 1,
      [&](std::vector<WatchEvent> evs, int64_t) {
        for (auto& e : evs) replay.push_back(std::move(e));
        if (replay.size() >= 3) stop2 = true;
      },
      stop2, 5s);
  CHECK(end.why == WatchEnd::Why::stopped);
  CHECK(replay.size() == 3);

  auto compact = c.put("/w/b", "after");
  REQUIRE(compact);
  REQUIRE(c.compact(*compact));
  std::atomic<bool> stop3{false};
  end = c.watch_prefix(
      "/w/", start->revision + 1, [](std::vector<WatchEvent>, int64_t) {}, stop3, 5s);
  CHECK(end.why == WatchEnd::Why::compacted);
  CHECK(end.compact_revision == *compact);
}

TEST_CASE("etcd client fails over to the next endpoint and reports when none answers") {
  testing::EtcdServer server;
  server.start();
  auto c = client_for({dead_url(), server.url()});
  REQUIRE(c.put("/f/k", "v"));
  CHECK(c.current_endpoint() == server.url());
  auto lease = c.grant(5s);
  REQUIRE(lease);

  auto none = client_for({dead_url(), dead_url()}, 500ms);
  const auto begin = std::chrono::steady_clock::now();
  auto r = none.put("/f/k", "v");
  REQUIRE_FALSE(r);
  CHECK(r.error().code == protocol::ErrorCode::peer_unreachable);
  CHECK(std::chrono::steady_clock::now() - begin < 3s);

  // A frozen etcd accepts connections but never answers: the call gives up at its timeout.
  server.freeze();
  auto frozen = client_for({server.url()}, 500ms);
  const auto t0 = std::chrono::steady_clock::now();
  auto f = frozen.put("/f/k", "v");
  CHECK_FALSE(f);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  std::atomic<bool> stop{false};
  auto end = frozen.watch_prefix(
      "/f/", 0, [](std::vector<WatchEvent>, int64_t) {}, stop, 500ms);
  CHECK(end.why == WatchEnd::Why::failed);
  server.thaw();
  CHECK(frozen.put("/f/k", "back"));
}

TEST_CASE("etcd client traffic counts answered calls, listings and watch events") {
  testing::EtcdServer server;
  server.start();
  auto traffic = std::make_shared<etcd::Traffic>();
  auto made = EtcdClient::create({{server.url()}, 2000ms, traffic});
  REQUIRE(made);
  auto& c = *made;
  REQUIRE(c.put("/t/a", std::string(100, 'x')));
  CHECK(traffic->calls == 1);
  CHECK(traffic->range_bytes == 0);
  const uint64_t before_range = traffic->call_bytes;
  auto listed = c.range_prefix("/t/");
  REQUIRE(listed);
  CHECK(traffic->calls == 2);
  // The listing's answer holds the value in base64 (100 bytes -> 136): its body is all counted.
  CHECK(traffic->range_bytes > 136);
  CHECK(traffic->call_bytes - before_range == traffic->range_bytes);

  std::atomic<bool> stop{false};
  auto end = c.watch_prefix(
      "/t/", listed->revision,  // replays the put: one event
      [&](std::vector<WatchEvent>, int64_t) { stop = true; }, stop, 5s);
  CHECK(end.why == WatchEnd::Why::stopped);
  CHECK(traffic->watch_events == 1);
  CHECK(traffic->watch_bytes > 136);  // the event carries the record too
  CHECK_FALSE(EtcdClient::create({{dead_url()}, 300ms, traffic})->put("/t/b", "y"));
  CHECK(traffic->calls == 2);  // a call nobody answered costs nothing here
}

TEST_CASE("etcd client keeps its connection alive across calls and copies, and reconnects after a restart") {
  testing::EtcdServer server;
  server.start();
  auto traffic = std::make_shared<etcd::Traffic>();
  auto made = EtcdClient::create({{server.url()}, 2000ms, traffic});
  REQUIRE(made);
  const EtcdClient c = *made;
  auto lease = c.grant(30s);
  REQUIRE(lease);
  for (int i = 0; i < 20; ++i) REQUIRE(c.keep_alive(lease->id));
  const EtcdClient copy = c;  // copies share the kept connections
  REQUIRE(copy.put("/k/a", "a", lease->id));
  CHECK(traffic->calls == 22);
  CHECK(traffic->connections == 1);  // not one per renewal
  // etcd restarts: the kept connection is closed under the client, which notices before its next call and
  // opens a new one, so the call itself does not fail.
  server.stop();
  server.start();
  REQUIRE(c.put("/k/b", "b"));
  CHECK(traffic->connections == 2);
  CHECK(traffic->calls == 23);
}

// A process out of descriptors (thousands of connections) cannot even make the HTTP client's epoll set:
// Asio throws there, and a throw out of the membership's etcd threads ended the whole process. Every call
// must fail like any other etcd trouble instead, and work again once descriptors are free.
TEST_CASE("etcd client calls fail cleanly without descriptors and recover after") {
  testing::EtcdServer server;
  server.start();
  auto c = client_for({server.url()});
  REQUIRE(c.put("/fd/a", "1"));
  auto made = EtcdClient::create({{server.url()}, 2000ms});
  REQUIRE(made);
  EtcdClient fresh = std::move(*made);  // no kept connection: it must open one
  testing::NoFreeDescriptors none;
  REQUIRE(none.active());
  auto put = fresh.put("/fd/b", "2");
  std::atomic<bool> stop{false};
  auto watched = fresh.watch_prefix(
      "/fd/", 1, [](std::vector<WatchEvent>, int64_t) {}, stop, 1s);
  none.restore();
  REQUIRE_FALSE(put);
  CHECK(put.error().detail.find(server.url().substr(7)) != std::string::npos);  // names the endpoint
  CHECK(watched.why == WatchEnd::Why::failed);
  CHECK(fresh.put("/fd/b", "2"));
}

// The etcd membership actor under CAF's test coordinator, fed the watcher's messages (Listing, Changes) by
// hand: one watch event is applied as a delta, touching only its own entry in the peer directory and in a
// router's view, and the heartbeat tick puts only the entries whose health changed.
#include <spdlog/spdlog.h>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>

#include "epd/actors/membership/membership.hpp"
#include "membership/etcd/etcd_agent.hpp"
#include "membership/etcd/etcd_membership_actor.hpp"
#include "role_harness.hpp"

using namespace epd;
using namespace epd::actors;
using namespace std::chrono_literals;

namespace {

struct EtcdRouterFixture {
  test::Harness h;
  BridgePtr bridge = h.offline_bridge("router-0", 1);
  std::shared_ptr<RegistryView> view;
  std::shared_ptr<std::vector<PeerChanges>> got = std::make_shared<std::vector<PeerChanges>>();
  caf::actor membership;

  // A router (with a view) unless `router` is false.
  explicit EtcdRouterFixture(bool router = true) {
    if (router) view = std::make_shared<RegistryView>();
    EtcdMembershipConfig c;
    c.prefix = "/epd/t/";
    c.lease_ttl = 1000ms;
    c.heartbeat_interval = 100ms;
    c.heartbeat_misses = 3;
    c.self = test::peer("router-0", "router", 1);
    auto role = h.keep(h.system().spawn(
        [](std::shared_ptr<std::vector<PeerChanges>> out) -> caf::behavior {
          return {[out](PeerChanges& pc) { out->push_back(pc); }};
        },
        got));
    auto a =
        etcd_backend::spawn_etcd_membership(h.system(), bridge, c, std::make_shared<LoadGauge>(), role, view);
    REQUIRE(a);
    membership = h.keep(*a);
    h.run();
  }
  // etcd lists us and `n` decode instances, decode-0000.. at incarnation 10.
  void list(size_t n) {
    etcd_backend::Listing l;
    l.peers.push_back(test::peer("router-0", "router", 1));
    for (size_t i = 0; i < n; ++i) l.peers.push_back(test::peer(name(i), "decode", 10));
    l.revision = 1;
    caf::anon_send(membership, std::move(l));
    h.run();
  }
  static std::string name(size_t i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "decode-%04zu", i);
    return buf;
  }
  void watch(const std::string& id, std::optional<protocol::PeerInfo> info) {
    etcd_backend::Changes c;
    c.changes.push_back({id, std::move(info)});
    caf::anon_send(membership, std::move(c));
    h.run();
  }
  void heartbeat(const std::string& id, uint64_t incarnation) {
    protocol::Heartbeat hb;
    hb.load.healthy = true;
    hb.load.free_kv_pages = 5;
    test::deliver(*bridge, id, incarnation, hb);
    h.run();
  }
  // The ids the view changed since last asked, each with whether it is still there.
  std::map<std::string, bool> view_changes() {
    std::map<std::string, bool> out;
    view->take_changes([&](const std::string& id, const RegistryEntry* e) { out[id] = e != nullptr; });
    return out;
  }
  // What a full rewrite of the table would alter even where nothing changed: when it was last heard.
  std::map<std::string, std::chrono::steady_clock::time_point> seen() const {
    std::map<std::string, std::chrono::steady_clock::time_point> out;
    for (const auto& e : view->entries()) out[e.info.instance_id] = e.last_seen;
    return out;
  }
};

bool is(const PeerDirectory::Change& c, const std::string& id, uint64_t old_inc, uint64_t new_inc) {
  return c.id == id && c.old_incarnation == old_inc && c.new_incarnation == new_inc;
}

}  // namespace

TEST_CASE("etcd membership: one watch event changes only its own entry in the directory and the view") {
  EtcdRouterFixture f;
  f.list(20);
  REQUIRE(f.got->size() == 1);
  CHECK(f.got->at(0).changes.size() == 21);
  CHECK(f.view_changes().size() == 21);
  CHECK(f.bridge->peers().version() == 1);
  f.got->clear();
  f.heartbeat("decode-0005", 10);
  CHECK(f.view_changes() == std::map<std::string, bool>{{"decode-0005", true}});

  // Ticks with no health changed put nothing; none of the entries is rewritten.
  auto before = f.seen();
  f.h.advance(150ms, 50ms);
  CHECK(f.view_changes().empty());
  CHECK(f.seen() == before);

  SECTION("a restart") {
    f.watch("decode-0007", test::peer("decode-0007", "decode", 11));
    REQUIRE(f.got->size() == 1);
    REQUIRE(f.got->at(0).changes.size() == 1);
    CHECK(is(f.got->at(0).changes[0], "decode-0007", 10, 11));
    CHECK(f.view_changes() == std::map<std::string, bool>{{"decode-0007", true}});
    auto after = f.seen();
    CHECK(after.at("decode-0007") > before.at("decode-0007"));
    after.erase("decode-0007");
    before.erase("decode-0007");
    CHECK(after == before);  // nothing else was rewritten
    CHECK(f.bridge->peers().find("decode-0007")->incarnation == 11);
    CHECK(f.bridge->peers().version() == 2);
  }
  SECTION("a new instance") {
    f.watch("decode-0100", test::peer("decode-0100", "decode", 3));
    REQUIRE(f.got->size() == 1);
    REQUIRE(f.got->at(0).changes.size() == 1);
    CHECK(is(f.got->at(0).changes[0], "decode-0100", 0, 3));
    CHECK(f.view_changes() == std::map<std::string, bool>{{"decode-0100", true}});
    auto after = f.seen();
    after.erase("decode-0100");
    CHECK(after == before);
    CHECK(f.bridge->peers().incarnations().size() == 22);
  }
  SECTION("a deleted record of a silent instance goes at once") {
    f.watch("decode-0003", std::nullopt);
    REQUIRE(f.got->size() == 1);
    REQUIRE(f.got->at(0).changes.size() == 1);
    CHECK(is(f.got->at(0).changes[0], "decode-0003", 10, 0));
    CHECK(f.view_changes() == std::map<std::string, bool>{{"decode-0003", false}});
    before.erase("decode-0003");
    CHECK(f.seen() == before);
    CHECK_FALSE(f.bridge->peers().find("decode-0003"));
  }
  SECTION("a record put again with another endpoint is taken, though its incarnation is the same") {
    auto moved = test::peer("decode-0007", "decode", 10);
    moved.control_endpoint = "tcp://127.0.0.1:39999";
    f.watch("decode-0007", moved);
    CHECK(f.got->empty());  // not a restart: the role is told nothing
    CHECK(f.bridge->peers().endpoint_of("decode-0007") == "tcp://127.0.0.1:39999");
    CHECK(f.bridge->peers().version() == 2);
  }
  SECTION("a record put again unchanged changes nothing") {
    f.watch("decode-0007", test::peer("decode-0007", "decode", 10));
    CHECK(f.got->empty());
    CHECK(f.view_changes().empty());
    CHECK(f.bridge->peers().version() == 1);
  }
}

TEST_CASE("etcd membership: a batch of watch events is one delta listed as a full replace would list it") {
  EtcdRouterFixture f;
  f.list(10);
  f.got->clear();
  (void)f.view_changes();
  etcd_backend::Changes c;
  c.changes.push_back({"decode-0050", test::peer("decode-0050", "decode", 1)});   // new
  c.changes.push_back({"decode-0008", std::nullopt});                             // gone
  c.changes.push_back({"decode-0002", test::peer("decode-0002", "decode", 11)});  // restarted
  caf::anon_send(f.membership, std::move(c));
  f.h.run();
  REQUIRE(f.got->size() == 1);
  const auto& ch = f.got->at(0).changes;
  REQUIRE(ch.size() == 3);
  CHECK(is(ch[0], "decode-0002", 10, 11));  // known peers first, by id, then the new ones
  CHECK(is(ch[1], "decode-0008", 10, 0));
  CHECK(is(ch[2], "decode-0050", 0, 1));
  CHECK(f.view_changes() ==
        std::map<std::string, bool>{{"decode-0002", true}, {"decode-0008", false}, {"decode-0050", true}});
  CHECK(f.bridge->peers().version() == 2);
}

TEST_CASE("etcd membership: a deleted record of a live instance goes after the grace period as one change") {
  EtcdRouterFixture f;
  f.list(5);
  f.heartbeat("decode-0001", 10);
  f.got->clear();
  (void)f.view_changes();
  f.watch("decode-0001", std::nullopt);  // it still heartbeats: its lease may have expired in an etcd outage
  CHECK(f.got->empty());
  CHECK(f.view_changes().empty());
  f.h.advance(1100ms, 50ms);  // the lease TTL passes and it did not put its record again
  REQUIRE(f.got->size() == 1);
  REQUIRE(f.got->at(0).changes.size() == 1);
  CHECK(is(f.got->at(0).changes[0], "decode-0001", 10, 0));
  CHECK(f.view_changes() == std::map<std::string, bool>{{"decode-0001", false}});
  CHECK_FALSE(f.bridge->peers().find("decode-0001"));
  CHECK(f.bridge->peers().version() == 2);
}

TEST_CASE("etcd membership: a dropped record put back is placed only after its next heartbeat") {
  EtcdRouterFixture f;
  f.list(3);
  f.heartbeat("decode-0001", 10);
  f.watch("decode-0001", std::nullopt);  // its lease expired while it still beats (an etcd outage)
  for (int i = 0; i < 10; ++i) {         // it beats through the grace period, and is dropped at its end
    REQUIRE(f.bridge->peers().find("decode-0001"));
    f.h.advance(100ms, 50ms);
    f.heartbeat("decode-0001", 10);
  }
  REQUIRE_FALSE(f.bridge->peers().find("decode-0001"));
  // It puts its record back at once: what it said before it was dropped does not make it placeable.
  f.watch("decode-0001", test::peer("decode-0001", "decode", 10));
  auto entry = [&] {
    for (const auto& e : f.view->entries())
      if (e.info.instance_id == "decode-0001") return std::optional(e);
    return std::optional<RegistryEntry>();
  };
  REQUIRE(entry());
  CHECK_FALSE(entry()->load.healthy);
  f.heartbeat("decode-0001", 10);
  CHECK(entry()->load.healthy);
}

TEST_CASE("etcd membership: the tick puts only the instances whose heartbeats stopped") {
  EtcdRouterFixture f;
  f.list(20);
  f.heartbeat("decode-0001", 10);
  f.heartbeat("decode-0002", 10);
  (void)f.view_changes();
  f.h.advance(200ms, 50ms);  // within the limit (3 x 100 ms): still healthy, nothing put
  CHECK(f.view_changes().empty());
  f.h.advance(200ms, 50ms);
  CHECK(f.view_changes() == std::map<std::string, bool>{{"decode-0001", true}, {"decode-0002", true}});
  for (const auto& e : f.view->entries()) CHECK_FALSE(e.load.healthy);
  f.h.advance(300ms, 50ms);
  CHECK(f.view_changes().empty());  // already shown unhealthy
  f.heartbeat("decode-0002", 10);
  CHECK(f.view_changes() == std::map<std::string, bool>{{"decode-0002", true}});
}

// Not a test: what one watch event costs the actor at fleet size (issue 37). Run it by name or with
// `actors_tests "[.bench]"`; it prints, it asserts nothing about time.
TEST_CASE("etcd membership: time per watch event at 1000 and 5000 instances", "[.bench]") {
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::warn);  // the per-peer log lines would time the terminal
  for (bool router : {false, true})
    for (size_t n : {1000, 5000}) {
      EtcdRouterFixture f(router);
      f.list(n);
      const int events = 200;
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < events; ++i) {
        const auto id = EtcdRouterFixture::name(size_t(i) * 7 % n);
        f.watch(id, test::peer(id, "decode", 100 + uint64_t(i)));
      }
      const double us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / events;
      std::printf("etcd membership watch event: %-8s N = %5zu: %9.1f us per put\n",
                  router ? "router" : "instance", n, us);
      CHECK(f.got->size() == size_t(events) + 1);
      f.h.shutdown();
    }
  spdlog::set_level(level);
}

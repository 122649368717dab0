// etcd_watch = "routers" under CAF's test coordinator: a router passes its watch on to the other instances as
// RECORDS (the full list to a new instance, from one router only, deltas gathered over a window to the rest,
// the full list again on a resync, once it may have been lost, or to one that stays silent for long), and an
// instance applies what is newer than what it holds, whichever router sent it, and asks a router for the full
// list when it is still short of what that router sent (after a gap, or as its heartbeat says) a heartbeat
// later.
#include <catch2/catch.hpp>
#include <chrono>
#include <set>

#include "epd/actors/membership/membership.hpp"
#include "membership/etcd/etcd_agent.hpp"
#include "membership/etcd/etcd_membership_actor.hpp"
#include "membership/etcd/record_relay.hpp"
#include "role_harness.hpp"

using namespace epd;
using namespace epd::actors;
using namespace std::chrono_literals;

namespace etcd_relay {

EtcdMembershipConfig relay_config(const protocol::PeerInfo& self) {
  EtcdMembershipConfig c;
  c.prefix = "/epd/t/";
  c.lease_ttl = 1000ms;
  c.heartbeat_interval = 100ms;
  c.heartbeat_misses = 3;
  c.routers_watch = true;
  c.records_window = 50ms;
  c.records_window_max = 400ms;
  c.self = self;
  return c;
}

// One instance's membership actor on an offline bridge: a router (with a view) or another instance.
struct Node {
  test::Harness h;
  BridgePtr bridge;
  std::shared_ptr<std::vector<PeerChanges>> got = std::make_shared<std::vector<PeerChanges>>();
  caf::actor membership;

  Node(const std::string& id, const std::string& role) : bridge(h.offline_bridge(id, 1)) {
    auto view = role == "router" ? std::make_shared<RegistryView>() : nullptr;
    auto sink = h.keep(h.system().spawn(
        [](std::shared_ptr<std::vector<PeerChanges>> out) -> caf::behavior {
          return {[out](PeerChanges& pc) { out->push_back(pc); }};
        },
        got));
    auto a = etcd_backend::spawn_etcd_membership(h.system(), bridge, relay_config(test::peer(id, role, 1)),
                                                 std::make_shared<LoadGauge>(), sink, view);
    REQUIRE(a);
    membership = h.keep(*a);
    h.run();
  }
  void list(std::vector<protocol::PeerInfo> peers, int64_t revision) {
    caf::anon_send(membership, etcd_backend::Listing{std::move(peers), revision});
    h.run();
  }
  void watch(std::vector<etcd_backend::Change> changes, int64_t revision) {
    caf::anon_send(membership, etcd_backend::Changes{std::move(changes), revision});
    h.run();
  }
  // The RECORDS sent since last asked, by destination endpoint.
  std::multimap<std::string, protocol::Records> records() {
    std::multimap<std::string, protocol::Records> out;
    for (const auto& s : test::sent(*bridge))
      if (const auto* r = s.as<protocol::Records>()) out.emplace(s.to, *r);
    return out;
  }
  // The HEARTBEATs sent since last asked, by destination endpoint.
  std::map<std::string, protocol::Heartbeat> heartbeats() {
    std::map<std::string, protocol::Heartbeat> out;
    for (const auto& s : test::sent(*bridge))
      if (const auto* hb = s.as<protocol::Heartbeat>()) out[s.to] = *hb;
    return out;
  }
};

protocol::PeerInfo decode(int i, uint64_t incarnation = 10) {
  return test::peer("decode-" + std::to_string(i), "decode", incarnation);
}

std::string at(const std::string& id) {
  return "offline://" + id;
}

std::set<std::string> ids_of(const protocol::Records& r) {
  std::set<std::string> out;
  for (const auto& c : r.changes) out.insert(c.id);
  return out;
}

std::set<std::string> endpoints(const std::multimap<std::string, protocol::Records>& sent) {
  std::set<std::string> out;
  for (const auto& [to, _] : sent) out.insert(to);
  return out;
}

protocol::Records full(uint64_t revision, const std::vector<protocol::PeerInfo>& peers) {
  protocol::Records r;
  r.revision = revision;
  for (const auto& p : peers) r.changes.push_back({p.instance_id, revision, p});
  return r;
}

protocol::Records delta(uint64_t since, uint64_t revision, std::vector<protocol::RecordChange> changes) {
  protocol::Records r;
  r.full = false;
  r.since = since;
  r.revision = revision;
  r.changes = std::move(changes);
  return r;
}

}  // namespace etcd_relay

using namespace etcd_relay;

TEST_CASE("etcd relay: a router sends the full list to new instances and one delta per window to the rest") {
  // decode-4's and decode-2's RECORDS are router-0's to send, of router-0 and router-1 (list_rank);
  // decode-1's are router-1's.
  const std::vector<std::string> routers{"router-0", "router-1"};
  REQUIRE(etcd_backend::list_rank(routers, "router-0", "decode-4") == 0);
  REQUIRE(etcd_backend::list_rank(routers, "router-0", "decode-2") == 0);
  REQUIRE(etcd_backend::list_rank(routers, "router-0", "decode-1") == 1);
  Node r("router-0", "router");
  r.list({test::peer("router-0", "router", 1), test::peer("router-1", "router", 1), decode(1), decode(2)}, 5);
  auto sent = r.records();
  // The decodes get the full list (a router that lists gives it to all); routers watch etcd themselves.
  CHECK(endpoints(sent) == std::set<std::string>{at("decode-1"), at("decode-2")});
  for (const auto& [to, rec] : sent) {
    CHECK(rec.full);
    CHECK(rec.revision == 5);
    CHECK(ids_of(rec) == std::set<std::string>{"router-0", "router-1", "decode-1", "decode-2"});
  }

  // A lone event goes at once: a delta to those holding a list whose RECORDS are ours (not decode-1), the
  // full list to the new instance.
  r.watch({{"decode-4", decode(4), 6}}, 6);
  sent = r.records();
  CHECK(endpoints(sent) == std::set<std::string>{at("decode-2"), at("decode-4")});
  for (const auto& [to, rec] : sent) {
    INFO(to);
    if (to == at("decode-4")) {
      CHECK(rec.full);
      CHECK(rec.revision == 6);
      CHECK(ids_of(rec).size() == 5);
    } else {
      CHECK_FALSE(rec.full);
      CHECK(rec.since == 5);
      CHECK(rec.revision == 6);
      CHECK(ids_of(rec) == std::set<std::string>{"decode-4"});
    }
  }

  // Events within the window wait for its end and go together.
  r.watch({{"decode-1", std::nullopt, 7}}, 7);
  r.watch({{"decode-2", decode(2, 11), 8}}, 8);  // restarted: a new process holds no list
  CHECK(r.records().empty());
  r.h.advance(60ms, 10ms);
  sent = r.records();
  CHECK(endpoints(sent) == std::set<std::string>{at("decode-2"), at("decode-4")});
  for (const auto& [to, rec] : sent) {
    INFO(to);
    if (to == at("decode-2")) {
      CHECK(rec.full);
      CHECK(ids_of(rec) == std::set<std::string>{"router-0", "router-1", "decode-2", "decode-4"});
    } else {
      CHECK_FALSE(rec.full);
      CHECK(rec.since == 6);
      CHECK(rec.revision == 8);
      REQUIRE(rec.changes.size() == 2);
      CHECK(rec.changes[0].id == "decode-1");
      CHECK_FALSE(rec.changes[0].info);
      CHECK(rec.changes[1].revision == 8);
    }
  }
}

TEST_CASE("etcd relay: a burst of events widens the window up to its cap and a lone event goes at once") {
  Node r("router-0", "router");
  r.list({test::peer("router-0", "router", 1), decode(1)}, 5);
  (void)r.records();
  int64_t revision = 5;
  auto join = [&](int i) {
    const int n = i + 2;  // decode-1 is the member that counts
    r.watch({{"decode-" + std::to_string(n), decode(n), ++revision}}, revision);
  };
  auto deltas_to_1 = [&] {
    size_t n = 0;
    for (const auto& [to, rec] : r.records()) n += to == at("decode-1") && !rec.full;
    return n;
  };
  test::check_burst_window(r.h, join, deltas_to_1);
}

TEST_CASE("etcd relay: one router sends a new instance its list and the other steps in if it stays silent") {
  const std::vector<protocol::PeerInfo> routers{test::peer("router-0", "router", 1),
                                                test::peer("router-1", "router", 1)};
  Node r0("router-0", "router");
  Node r1("router-1", "router");
  for (auto* r : {&r0, &r1}) {
    r->list(routers, 5);
    // Ten instances join in one window.
    std::vector<etcd_backend::Change> joins;
    for (int i = 1; i <= 10; ++i) joins.push_back({"decode-" + std::to_string(i), decode(i), 5 + i});
    r->watch(std::move(joins), 15);
  }
  auto lists_from = [](Node& r) {
    std::set<std::string> to;
    for (const auto& [endpoint, rec] : r.records())
      if (rec.full) to.insert(endpoint);
    return to;
  };
  const auto from0 = lists_from(r0), from1 = lists_from(r1);
  // Each gets one list, not two, and both routers share the work.
  std::set<std::string> all = from0;
  all.insert(from1.begin(), from1.end());
  CHECK(all.size() == 10);
  CHECK(from0.size() + from1.size() == 10);
  CHECK_FALSE(from0.empty());
  CHECK_FALSE(from1.empty());

  // Every instance but one got its list and sends both routers heartbeats; that one stays silent.
  const std::string silent = *from1.begin();
  protocol::Heartbeat hb;
  hb.load.healthy = true;
  for (int i = 1; i <= 10; ++i) {
    const std::string id = "decode-" + std::to_string(i);
    if (at(id) == silent) continue;
    test::deliver(*r0.bridge, id, 10, hb);
    test::deliver(*r1.bridge, id, 10, hb);
  }
  r0.h.run();
  r1.h.run();
  // No connection broke, so the list may only be slow: its own router sends it again after 30 s of silence,
  // the other steps in after 60 s, and nobody else gets a list.
  r1.h.advance(29500ms, 500ms);
  CHECK(lists_from(r1).empty());
  r1.h.advance(1000ms, 500ms);
  CHECK(lists_from(r1) == std::set<std::string>{silent});
  r0.h.advance(59000ms, 500ms);
  CHECK(lists_from(r0).empty());
  r0.h.advance(1500ms, 500ms);
  CHECK(lists_from(r0) == std::set<std::string>{silent});
  r0.h.advance(119000ms, 1000ms);  // then it doubles its wait, up to 120 s
  CHECK(lists_from(r0).empty());
  r0.h.advance(2000ms, 1000ms);
  CHECK(lists_from(r0) == std::set<std::string>{silent});
}

TEST_CASE("etcd relay: a list goes again at the next tick once it may be lost, not while it is only late") {
  Node r("router-0", "router");
  r.list({test::peer("router-0", "router", 1), test::peer("router-1", "router", 1)}, 5);
  std::vector<etcd_backend::Change> joins;
  for (int i = 1; i <= 10; ++i) joins.push_back({"decode-" + std::to_string(i), decode(i), 5 + i});
  r.watch(std::move(joins), 15);
  auto lists = [&] {
    std::set<std::string> to;
    for (const auto& [endpoint, rec] : r.records())
      if (rec.full) to.insert(endpoint);
    return to;
  };
  const auto ours = lists();  // the others' lists are router-1's to send
  std::set<std::string> theirs;
  for (int i = 1; i <= 10; ++i)
    if (!ours.count(at("decode-" + std::to_string(i)))) theirs.insert(at("decode-" + std::to_string(i)));
  REQUIRE_FALSE(ours.empty());
  REQUIRE_FALSE(theirs.empty());

  r.h.advance(20000ms, 500ms);  // nobody answers for 20 s, but every connection holds: nothing is resent
  CHECK(lists().empty());

  // Our connection to one of ours broke, and the frames queued on it with it: its list goes again at once.
  const std::string broke = ours.begin()->substr(at("").size());
  caf::anon_send(r.membership, PeerEvent{broke, at(broke), 10, 0, "test"});
  r.h.run();
  r.h.advance(100ms, 100ms);
  CHECK(lists() == std::set<std::string>{at(broke)});

  // router-1 is lost: the lists it was to send may be lost with it, and are ours to send now.
  caf::anon_send(r.membership, PeerEvent{"router-1", at("router-1"), 1, 0, "test"});
  r.h.run();
  r.h.advance(100ms, 100ms);
  CHECK(lists() == theirs);
}

TEST_CASE("etcd relay: a router sends the full list again on a resync and to an instance that stays silent") {
  Node r("router-0", "router");
  r.list({test::peer("router-0", "router", 1), decode(1), decode(2)}, 5);
  (void)r.records();
  protocol::Heartbeat hb;
  hb.load.healthy = true;
  test::deliver(*r.bridge, "decode-1", 10, hb);  // decode-1 got its list; decode-2 says nothing
  r.h.run();
  hb.resync = true;
  test::deliver(*r.bridge, "decode-1", 10, hb);
  r.h.run();
  auto sent = r.records();
  REQUIRE(sent.size() == 1);
  CHECK(sent.begin()->first == at("decode-1"));
  CHECK(sent.begin()->second.full);

  r.h.advance(29500ms, 500ms);
  CHECK(r.records().empty());
  r.h.advance(1000ms, 500ms);  // 30 s after its list: decode-2 gets it again, then after 60 s more
  sent = r.records();
  REQUIRE(sent.size() == 1);
  CHECK(sent.begin()->first == at("decode-2"));
  r.h.advance(59000ms, 500ms);
  CHECK(r.records().empty());
  r.h.advance(1500ms, 500ms);
  CHECK(r.records().size() == 1);
  hb.resync = false;
  test::deliver(*r.bridge, "decode-2", 10, hb);  // heard from at last: no more
  r.h.advance(300000ms, 5000ms);
  CHECK(r.records().empty());
}

TEST_CASE("etcd relay: an instance applies what is newer whoever sent it and asks for what it lost") {
  Node d("decode-1", "decode");
  const auto router0 = test::peer("router-0", "router", 1);
  const auto router1 = test::peer("router-1", "router", 1);
  test::deliver(*d.bridge, "router-0", 1, full(5, {router0, router1, decode(1), decode(2)}));
  d.h.run();
  REQUIRE(d.got->size() == 1);
  CHECK(d.bridge->peers().incarnations().size() == 4);
  d.got->clear();

  SECTION("a full list no newer than ours changes nothing") {
    test::deliver(*d.bridge, "router-1", 1, full(5, {router0, decode(1)}));
    d.h.run();
    CHECK(d.got->empty());
    CHECK(d.bridge->peers().incarnations().size() == 4);
  }
  SECTION("the same events from both routers, in different batches, apply once and in order") {
    // router-0 batched revisions 6..7; router-1 sends 6 alone, then 6..8.
    test::deliver(*d.bridge, "router-0", 1,
                  delta(5, 7, {{"decode-3", 6, decode(3)}, {"decode-3", 7, std::nullopt}}));
    d.h.run();
    CHECK_FALSE(d.bridge->peers().find("decode-3"));
    test::deliver(*d.bridge, "router-1", 1, delta(5, 6, {{"decode-3", 6, decode(3)}}));
    d.h.run();
    CHECK_FALSE(d.bridge->peers().find("decode-3"));  // revision 6 is old news: 7 deleted it
    test::deliver(*d.bridge, "router-1", 1,
                  delta(6, 8, {{"decode-3", 7, std::nullopt}, {"decode-4", 8, decode(4)}}));
    d.h.run();
    CHECK_FALSE(d.bridge->peers().find("decode-3"));
    CHECK(d.bridge->peers().find("decode-4"));
    std::set<std::string> changed;
    for (const auto& pc : *d.got)
      for (const auto& c : pc.changes) changed.insert(c.id);
    CHECK(changed == std::set<std::string>{"decode-4"});  // decode-3 came and went in one batch
  }
  SECTION("a delta after a gap is not applied, and if the sender's heartbeat finds us still short we ask") {
    test::deliver(*d.bridge, "router-1", 1, delta(9, 10, {{"decode-5", 10, decode(5)}}));
    d.h.run();
    CHECK_FALSE(d.bridge->peers().find("decode-5"));
    d.h.advance(110ms, 10ms);
    auto hbs = d.heartbeats();
    REQUIRE(hbs.count(at("router-1")));
    CHECK_FALSE(hbs.at(at("router-1")).resync);  // router-0 may be sending revisions 6..9
    protocol::Heartbeat hb;
    hb.records_revision = 10;
    test::deliver(*d.bridge, "router-1", 1, hb);
    d.h.run();
    d.h.advance(110ms, 10ms);
    hbs = d.heartbeats();
    CHECK(hbs.at(at("router-1")).resync);
    CHECK_FALSE(hbs.at(at("router-0")).resync);
    d.h.advance(110ms, 10ms);
    hbs = d.heartbeats();
    CHECK_FALSE(hbs.at(at("router-1")).resync);  // asked once
    test::deliver(*d.bridge, "router-1", 1, full(10, {router0, router1, decode(1), decode(5)}));
    d.h.run();
    CHECK(d.bridge->peers().find("decode-5"));
    d.h.advance(1100ms, 100ms);  // decode-2 still looked alive to us: it goes after the grace period
    CHECK_FALSE(d.bridge->peers().find("decode-2"));
  }
  SECTION("a gap the other router's delta fills asks nothing") {
    test::deliver(*d.bridge, "router-1", 1, delta(6, 7, {{"decode-4", 7, decode(4)}}));
    test::deliver(*d.bridge, "router-0", 1,
                  delta(5, 7, {{"decode-3", 6, decode(3)}, {"decode-4", 7, decode(4)}}));
    protocol::Heartbeat hb;
    hb.records_revision = 7;
    test::deliver(*d.bridge, "router-1", 1, hb);
    d.h.run();
    CHECK(d.bridge->peers().find("decode-3"));
    CHECK(d.bridge->peers().find("decode-4"));
    d.h.advance(110ms, 10ms);
    CHECK_FALSE(d.heartbeats().at(at("router-1")).resync);
  }
  SECTION("a router's heartbeat that says it sent more than we hold makes us ask it for the list") {
    // The last delta of a burst was lost: no later delta comes to show the gap, the heartbeat does. Once
    // we are still short of it at its next heartbeat: the events may be on their way from the other router.
    protocol::Heartbeat hb;
    hb.records_revision = 5;  // what we hold: nothing to ask
    test::deliver(*d.bridge, "router-0", 1, hb);
    d.h.run();
    d.h.advance(110ms, 10ms);
    auto hbs = d.heartbeats();
    REQUIRE(hbs.count(at("router-0")));
    CHECK_FALSE(hbs.at(at("router-0")).resync);
    hb.records_revision = 7;
    test::deliver(*d.bridge, "router-0", 1, hb);
    d.h.run();
    d.h.advance(110ms, 10ms);
    CHECK_FALSE(d.heartbeats().at(at("router-0")).resync);  // once: it may come from router-1
    test::deliver(*d.bridge, "router-0", 1, hb);
    d.h.run();
    d.h.advance(110ms, 10ms);
    hbs = d.heartbeats();
    CHECK(hbs.at(at("router-0")).resync);
    CHECK_FALSE(hbs.at(at("router-1")).resync);  // it said nothing of the kind
  }
  SECTION("a router's heartbeat that was ahead only until the other router's delta asks nothing") {
    protocol::Heartbeat hb;
    hb.records_revision = 7;
    test::deliver(*d.bridge, "router-0", 1, hb);
    test::deliver(*d.bridge, "router-1", 1,
                  delta(5, 7, {{"decode-3", 6, decode(3)}, {"decode-4", 7, decode(4)}}));
    hb.records_revision = 8;  // router-0 moved on meanwhile
    test::deliver(*d.bridge, "router-0", 1, hb);
    d.h.run();
    d.h.advance(110ms, 10ms);
    CHECK_FALSE(d.heartbeats().at(at("router-0")).resync);
  }
}

TEST_CASE("etcd relay: before its first list an instance drops deltas and asks nobody") {
  Node d("decode-1", "decode");
  const auto router0 = test::peer("router-0", "router", 1);
  test::deliver(*d.bridge, "router-0", 1, delta(5, 6, {{"decode-3", 6, decode(3)}}));
  protocol::Heartbeat hb;
  hb.records_revision = 6;
  test::deliver(*d.bridge, "router-0", 1, hb);
  d.h.run();
  test::deliver(*d.bridge, "router-1", 1, full(5, {router0, decode(1)}));  // its list, from the other router
  d.h.run();
  CHECK(d.bridge->peers().find("router-0"));
  CHECK_FALSE(d.bridge->peers().find("decode-3"));
  d.h.advance(110ms, 10ms);
  CHECK_FALSE(d.heartbeats().at(at("router-0")).resync);
}

TEST_CASE(
    "etcd relay: a router's heartbeats say how far its RECORDS went, except to an instance awaiting its "
    "list") {
  Node r("router-0", "router");
  r.list({test::peer("router-0", "router", 1), decode(1), decode(2)}, 5);
  r.h.advance(90ms, 10ms);  // just before the first heartbeat tick (every 100 ms)
  (void)test::sent(*r.bridge);
  r.watch({{"decode-3", decode(3), 6}}, 6);  // a lone event goes at once
  r.watch({{"decode-4", decode(4), 7}}, 7);  // waits for the window's end, after the tick
  r.h.advance(20ms, 10ms);
  std::map<std::string, uint64_t> said;
  size_t records = 0;
  for (const auto& s : test::sent(*r.bridge)) {
    if (const auto* hb = s.as<protocol::Heartbeat>()) said[s.to] = hb->records_revision;
    if (s.as<protocol::Records>()) ++records;
  }
  CHECK(records == 3);  // revision 6: a delta to decode-1 and decode-2, the full list to decode-3
  REQUIRE(said.count(at("decode-1")));
  REQUIRE(said.count(at("decode-4")));
  CHECK(said.at(at("decode-1")) == 6);  // the last flush: revision 7 waits for the window's end
  CHECK(said.at(at("decode-3")) == 6);
  CHECK(said.at(at("decode-4")) == 0);  // its first list is on its way: nothing to compare with
  r.h.advance(100ms, 10ms);
  said.clear();
  for (const auto& s : test::sent(*r.bridge))
    if (const auto* hb = s.as<protocol::Heartbeat>()) said[s.to] = hb->records_revision;
  CHECK(said.at(at("decode-4")) == 7);
}

// One router sends each instance its RECORDS (list and deltas), so an instance decodes each event once. When
// that router stops serving, another takes its instances over at once, from where the stopped router's last
// heartbeat said its RECORDS had gone, so nothing it had not sent yet is lost.
TEST_CASE(
    "etcd relay: each instance gets RECORDS from one router, and another takes it over when that stops") {
  const std::vector<std::string> routers{"router-0", "router-1"};
  Node r("router-0", "router");
  std::vector<protocol::PeerInfo> peers{test::peer("router-0", "router", 1),
                                        test::peer("router-1", "router", 1)};
  std::set<std::string> ours, theirs;
  for (int i = 1; i <= 10; ++i) {
    peers.push_back(decode(i));
    const std::string id = "decode-" + std::to_string(i);
    (etcd_backend::list_rank(routers, "router-0", id) == 0 ? ours : theirs).insert(at(id));
  }
  REQUIRE_FALSE(ours.empty());
  REQUIRE_FALSE(theirs.empty());
  REQUIRE(etcd_backend::list_rank(routers, "router-0", "decode-11") == 0);
  REQUIRE(etcd_backend::list_rank(routers, "router-0", "decode-12") == 1);
  r.list(peers, 5);
  (void)r.records();
  protocol::Heartbeat from1;  // router-1 serves: it sent its instances RECORDS up to revision 6
  from1.load.healthy = true;
  from1.records_revision = 6;
  test::deliver(*r.bridge, "router-1", 1, from1);
  r.h.run();

  auto deltas_to = [](const std::multimap<std::string, protocol::Records>& sent) {
    std::set<std::string> to;
    for (const auto& [endpoint, rec] : sent)
      if (!rec.full) to.insert(endpoint);
    return to;
  };
  r.watch({{"decode-11", decode(11), 6}}, 6);
  CHECK(deltas_to(r.records()) == ours);
  ours.insert(at("decode-11"));  // it got our list
  // Heartbeats say how far our RECORDS went to our instances and to router-1; router-1's are not told: they
  // are not short of what we never sent them.
  r.h.advance(100ms, 100ms);
  auto beats = r.heartbeats();
  for (const auto& to : ours) CHECK(beats.at(to).records_revision == 6);
  for (const auto& to : theirs) CHECK(beats.at(to).records_revision == 0);
  CHECK(beats.at(at("router-1")).records_revision == 6);

  r.watch({{"decode-12", decode(12), 7}}, 7);  // router-1's to pass on
  CHECK(deltas_to(r.records()) == ours);
  auto expect_catch_up = [&] {
    // Everything after revision 6 (router-1's last word) to its instances, and to decode-12, whose list
    // router-1 was to send (it drops the delta: no list yet).
    auto caught_up = r.records();
    auto to = theirs;
    to.insert(at("decode-12"));
    CHECK(deltas_to(caught_up) == to);
    for (const auto& [endpoint, rec] : caught_up) {
      INFO(endpoint);
      CHECK(rec.since == 6);
      CHECK(rec.revision == 7);
      CHECK(ids_of(rec) == std::set<std::string>{"decode-12"});
    }
  };
  SECTION("its connection breaks: at once") {
    caf::anon_send(r.membership, PeerEvent{"router-1", at("router-1"), 1, 0, "test"});
    r.h.run();
    expect_catch_up();
  }
  SECTION("its heartbeats stop: once they are missed, and back to it when they come again") {
    r.h.advance(200ms, 100ms);  // 300 ms since its heartbeat: still within 3 x 100 ms
    CHECK(r.records().empty());
    r.h.advance(200ms, 100ms);
    expect_catch_up();
    r.h.advance(100ms, 100ms);
    beats = r.heartbeats();
    for (const auto& to : theirs) CHECK(beats.at(to).records_revision == 7);
    from1.records_revision = 7;
    test::deliver(*r.bridge, "router-1", 1, from1);
    r.h.run();
    r.watch({{"decode-3", std::nullopt, 8}}, 8);
    CHECK(deltas_to(r.records()) == ours);
  }
}

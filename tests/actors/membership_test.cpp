// The registry and the membership client under CAF's test coordinator: every frame they send is read from
// an offline bridge's outbox, every frame they receive is handed to that bridge, and heartbeat deadlines pass
// by advancing the coordinator's clock.
#include <catch2/catch.hpp>

#include "epd/actors/membership/membership.hpp"
#include "membership/registry.hpp"
#include "role_harness.hpp"

using namespace epd;
using namespace epd::actors;
using namespace std::chrono_literals;
using protocol::ErrorCode;
using protocol::MessageType;

namespace {

RegistryConfig registry_config() {
  RegistryConfig c;
  c.heartbeat_interval = 100ms;
  c.misses = 3;
  c.publish_window = 0ms;  // every change out at once, unless changes wait in the mailbox together
  return c;
}

struct RegistryFixture {
  test::Harness h;
  BridgePtr bridge = h.offline_bridge("router", 1);
  std::shared_ptr<RegistryView> view = std::make_shared<RegistryView>();
  caf::actor registry;

  explicit RegistryFixture(const RegistryConfig& config = registry_config())
      : registry(h.keep(spawn_registry(h.system(), bridge, config, view))) {
    h.run();
  }

  // Handled at once, or with `queued` at the next run(): several HELLOs then wait in the mailbox together.
  void hello(const std::string& id, uint64_t incarnation, const std::string& role = "decode",
             bool queued = false) {
    protocol::Hello m;
    m.role = role;
    m.control_endpoint = "offline://" + id;
    m.kv_pages_total = 8;
    m.identity = protocol::current_protocol_identity();
    test::deliver(*bridge, id, incarnation, m);
    if (!queued) h.run();
  }
  void heartbeat(const std::string& id, uint64_t incarnation, bool healthy = true) {
    protocol::Heartbeat hb;
    hb.load.healthy = healthy;
    hb.load.free_kv_pages = 5;
    test::deliver(*bridge, id, incarnation, hb);
    h.run();
  }
};

// The PEERS frames in `frames`, by destination endpoint.
std::map<std::string, protocol::Peers> peers_by_endpoint(const std::vector<test::Sent>& frames) {
  std::map<std::string, protocol::Peers> out;
  for (const auto* f : test::of_type<protocol::Peers>(frames)) out[f->to] = *f->as<protocol::Peers>();
  return out;
}

std::vector<std::string> ids(const protocol::Peers& p) {
  std::vector<std::string> out;
  for (const auto& i : p.peers) out.push_back(i.instance_id);
  return out;
}

TEST_CASE("registry: HELLO is acknowledged with the full list and every other member gets a delta") {
  RegistryFixture f;
  f.hello("a", 10);
  auto out = test::sent(*f.bridge);
  std::string to;
  const auto ack = test::only<protocol::HelloAck>(out, &to);
  CHECK(ack.accepted);
  CHECK(ack.heartbeat_interval_ms == 100);
  CHECK(to == "offline://a");

  f.hello("b", 20);
  out = test::sent(*f.bridge);
  auto peers = peers_by_endpoint(out);
  REQUIRE(peers.size() == 2);  // both members, each at its own endpoint
  const auto& full = peers["offline://b"];
  CHECK(full.full);
  CHECK(full.version == 2);
  CHECK(ids(full) == std::vector<std::string>{"a", "b"});
  const auto& delta = peers["offline://a"];
  CHECK_FALSE(delta.full);
  CHECK(delta.version == 2);
  CHECK(ids(delta) == std::vector<std::string>{"b"});  // only the member that joined
  CHECK(delta.left.empty());
  REQUIRE(f.view->entries().size() == 2);
  CHECK_FALSE(f.view->entries().at(1).load.healthy);  // not placed before its first healthy HEARTBEAT
  CHECK(f.view->entries().at(1).load.total_kv_pages == 8);

  // A repeated HELLO of the same incarnation (the ACK was lost) is acknowledged again and changes nothing.
  f.hello("b", 20);
  out = test::sent(*f.bridge);
  CHECK(test::of_type<protocol::HelloAck>(out).size() == 1);
  CHECK(test::of_type<protocol::Peers>(out).empty());
}

// At a cluster's start hundreds of HELLOs wait in the registry's mailbox at once: one delta per member for
// all of them, not one per HELLO (which made a start O(N^2) messages).
TEST_CASE("registry: changes waiting together go out as one version - a full list to joiners and one delta") {
  RegistryFixture f;
  f.hello("a", 10);
  f.hello("b", 20);
  test::sent(*f.bridge);
  f.hello("c", 30, "prefill", true);
  f.hello("d", 40, "prefill", true);
  protocol::Goodbye bye;
  test::deliver(*f.bridge, "a", 10, bye);
  f.h.run();
  const auto out = test::sent(*f.bridge);
  CHECK(test::of_type<protocol::HelloAck>(out).size() == 2);
  auto peers = peers_by_endpoint(out);
  CHECK(test::of_type<protocol::Peers>(out).size() == 3);  // b, c, d: one each
  REQUIRE(peers.size() == 3);
  const auto& delta = peers["offline://b"];
  CHECK_FALSE(delta.full);
  CHECK(delta.version == 3);
  CHECK(ids(delta) == std::vector<std::string>{"c", "d"});
  CHECK(delta.left == std::vector<std::string>{"a"});
  for (const char* joiner : {"offline://c", "offline://d"}) {
    CHECK(peers[joiner].full);
    CHECK(peers[joiner].version == 3);
    CHECK(ids(peers[joiner]) == std::vector<std::string>{"b", "c", "d"});
  }
  CHECK(f.view->entries().size() == 3);
}

TEST_CASE("registry: a change within the publish window waits for its end and goes out with the next") {
  auto cfg = registry_config();
  cfg.publish_window = 50ms;
  RegistryFixture f(cfg);
  auto& h = f.h;
  auto& bridge = f.bridge;
  auto& view = f.view;
  f.hello("a", 10);  // the first change: out at once
  CHECK(peers_by_endpoint(test::sent(*bridge)).at("offline://a").version == 1);
  f.hello("b", 20);
  h.advance(20ms, 10ms);
  f.hello("c", 30);
  auto out = test::sent(*bridge);
  CHECK(test::of_type<protocol::HelloAck>(out).size() == 2);
  CHECK(test::of_type<protocol::Peers>(out).empty());  // the window is still open
  CHECK(view->entries().size() == 3);                  // the router's view does not wait
  h.advance(40ms, 10ms);
  auto peers = peers_by_endpoint(test::sent(*bridge));
  REQUIRE(peers.size() == 3);
  CHECK(peers["offline://a"].version == 2);
  CHECK(ids(peers["offline://a"]) == std::vector<std::string>{"b", "c"});
  CHECK(peers["offline://b"].full);
  CHECK(peers["offline://c"].full);
}

TEST_CASE(
    "registry: a burst of changes widens the publish window up to its cap and a lone change goes at once") {
  auto cfg = registry_config();
  cfg.misses = 1000;  // nobody expires during the test
  cfg.publish_window = 50ms;
  cfg.publish_window_max = 400ms;
  RegistryFixture f(cfg);
  f.hello("a", 10);
  (void)test::sent(*f.bridge);
  auto deltas_to_a = [&] {
    size_t n = 0;
    for (const auto& s : test::sent(*f.bridge))
      if (const auto* p = s.as<protocol::Peers>(); p && s.to == "offline://a" && !p->full) ++n;
    return n;
  };
  test::check_burst_window(
      f.h, [&](int i) { f.hello("m" + std::to_string(i), 20); }, deltas_to_a);
}

TEST_CASE("registry: HEARTBEATs update the view in place and send no PEERS") {
  RegistryFixture f;
  f.hello("a", 10);
  f.hello("b", 20);
  test::sent(*f.bridge);
  f.heartbeat("b", 20, true);  // healthy now: the router's view changes, the members hear nothing
  CHECK(test::of_type<protocol::Peers>(test::sent(*f.bridge)).empty());
  auto entries = f.view->entries();
  REQUIRE(entries.size() == 2);
  CHECK(entries.at(1).info.instance_id == "b");
  CHECK(entries.at(1).load.healthy);
  CHECK(entries.at(1).load.free_kv_pages == 5);
  CHECK_FALSE(entries.at(0).load.healthy);  // 'a' has not beaten yet
}

TEST_CASE("registry: a HEARTBEAT asking for a resync gets the full list at the current version") {
  RegistryFixture f;
  f.hello("a", 10);
  f.hello("b", 20);
  f.hello("c", 30);
  test::sent(*f.bridge);
  protocol::Heartbeat hb;
  hb.resync = true;
  hb.peers_version = 1;  // the list that answered its HELLO arrived; a later delta showed a gap
  test::deliver(*f.bridge, "a", 10, hb);
  f.h.run();
  auto peers = peers_by_endpoint(test::sent(*f.bridge));
  REQUIRE(peers.size() == 1);
  const auto& p = peers["offline://a"];
  CHECK(p.full);
  CHECK(p.version == 3);
  CHECK(ids(p) == std::vector<std::string>{"a", "b", "c"});
}

// What `epd_peer_lists_sent_total{why="<why>"}` counts in `registry`'s exposition (0: no such series).
double lists_sent(const metrics::Registry& registry, const std::string& why) {
  const std::string series = "epd_peer_lists_sent_total{why=\"" + why + "\"} ";
  const std::string text = registry.render();
  const auto at = text.find(series);
  return at == std::string::npos ? 0 : std::stod(text.substr(at + series.size()));
}

// A 1 s resend wait, counted in `exposition`; nobody expires while the clock runs for seconds.
RegistryConfig resend_config(metrics::Registry& exposition) {
  RegistryConfig config = registry_config();
  config.misses = 1000;
  config.list_resend_wait = 1000ms;
  config.metrics = std::make_shared<MembershipMetrics>(exposition);
  return config;
}

// 'a' (incarnation 10) beats, holding PEERS `version`, asking for the list or not: the PEERS sent then.
std::map<std::string, protocol::Peers> beat_a(RegistryFixture& f, uint64_t version, bool resync = false) {
  protocol::Heartbeat hb;
  hb.peers_version = version;
  hb.resync = resync;
  test::deliver(*f.bridge, "a", 10, hb);
  f.h.run();
  return peers_by_endpoint(test::sent(*f.bridge));
}

TEST_CASE("registry: a member that asks again while its list is on its way gets it again only when late") {
  metrics::Registry exposition;
  RegistryFixture f(resend_config(exposition));
  f.hello("a", 10);  // version 1: the full list is on its way to 'a'
  REQUIRE(peers_by_endpoint(test::sent(*f.bridge)).size() == 1);
  const auto beat = [&](uint64_t version, bool resync = false) { return beat_a(f, version, resync); };
  // A member on a busy host asks on every HEARTBEAT until it reads the list: one list, not one per ask.
  for (int i = 0; i < 9; ++i) {
    CHECK(beat(0, true).empty());
    f.h.advance(100ms, 100ms);
  }
  CHECK(beat(0, true).empty());
  f.h.advance(100ms, 100ms);
  auto again = beat(0, true);  // on its way for 1 s: late, or lost
  REQUIRE(again.size() == 1);
  CHECK(again["offline://a"].full);
  CHECK(beat(0, true).empty());  // and the next waits twice as long
  f.h.advance(1900ms, 100ms);
  CHECK(beat(0, true).empty());
  f.h.advance(100ms, 100ms);
  CHECK(beat(0, true).size() == 1);
  // It holds the list now. A gap found later, with no list on its way, is answered at once.
  CHECK(beat(1, false).empty());
  f.hello("b", 20);  // version 2
  test::sent(*f.bridge);
  auto gap = beat(1, true);
  REQUIRE(gap.size() == 1);
  CHECK(gap["offline://a"].version == 2);
  CHECK(beat(1, true).empty());  // that list is on its way now
  // Operators see why each list went: 'a' and 'b' joined, two went late, one answered a gap.
  CHECK(lists_sent(exposition, "joined") == 2);
  CHECK(lists_sent(exposition, "late") == 2);
  CHECK(lists_sent(exposition, "asked") == 1);
  CHECK(lists_sent(exposition, "stood_still") == 0);
}

TEST_CASE(
    "registry: a member whose HEARTBEATs hold one older version for the resend wait gets the full list") {
  metrics::Registry exposition;
  RegistryFixture f(resend_config(exposition));
  f.hello("a", 10);
  f.hello("b", 20);
  f.hello("c", 30);  // version 3
  test::sent(*f.bridge);
  const auto beat = [&](uint64_t version, bool resync = false) { return beat_a(f, version, resync); };
  // Up to date, or no version to compare (an older build): nothing, however long.
  for (int i = 0; i < 15; ++i) {
    CHECK(beat(i % 2 ? 3 : 0).empty());
    f.h.advance(100ms, 100ms);
  }
  // Behind but moving (a member reading late): each new version waits afresh.
  CHECK(beat(1).empty());
  f.h.advance(900ms, 100ms);
  CHECK(beat(2).empty());
  f.h.advance(900ms, 100ms);
  CHECK(beat(2).empty());
  // Held one second: the delta after it was lost with none behind it to show the gap.
  f.h.advance(100ms, 100ms);
  auto peers = beat(2);
  REQUIRE(peers.size() == 1);
  CHECK(peers["offline://a"].full);
  CHECK(peers["offline://a"].version == 3);
  CHECK(ids(peers["offline://a"]) == std::vector<std::string>{"a", "b", "c"});
  // Still behind after the resend: the next waits twice as long, then four times, and no longer.
  f.h.advance(1900ms, 100ms);
  CHECK(beat(2).empty());
  f.h.advance(100ms, 100ms);
  CHECK(beat(2).size() == 1);
  f.h.advance(3900ms, 100ms);
  CHECK(beat(2).empty());
  f.h.advance(100ms, 100ms);
  CHECK(beat(2).size() == 1);
  f.h.advance(4000ms, 100ms);
  CHECK(beat(2).size() == 1);
  // Caught up: the wait starts again from one second.
  CHECK(beat(3).empty());
  CHECK(beat(2).empty());
  f.h.advance(1000ms, 100ms);
  CHECK(beat(2).size() == 1);
  // Two for standing still; the three between went as lists that had not arrived.
  CHECK(lists_sent(exposition, "stood_still") == 2);
  CHECK(lists_sent(exposition, "late") == 3);
}

// On hosts that read lists a minute late, a list on its way for the resend wait is late, not lost: sent
// again, it only lengthens the queue it waits in. The wait stretches to twice the slowest delivery seen
// lately.
TEST_CASE("registry: a list goes again for lateness only past twice the slowest delivery seen lately") {
  metrics::Registry exposition;
  RegistryFixture f(resend_config(exposition));  // a 1 s wait
  const auto beat = [&](const std::string& id, uint64_t incarnation, uint64_t version) {
    protocol::Heartbeat hb;
    hb.peers_version = version;
    hb.resync = version == 0;  // no list yet: it asks
    test::deliver(*f.bridge, id, incarnation, hb);
    f.h.run();
    return peers_by_endpoint(test::sent(*f.bridge)).count("offline://" + id);
  };
  f.hello("a", 10);  // version 1, a's list on its way
  f.hello("b", 20);  // version 2, b's list on its way
  test::sent(*f.bridge);
  // a reads its list 3 s late: lists are that slow lately.
  f.h.advance(3000ms, 100ms);
  CHECK(beat("a", 10, 2) == 0);
  // b's, on its way as long, waits until twice that.
  CHECK(beat("b", 20, 0) == 0);
  f.h.advance(2900ms, 100ms);
  CHECK(beat("b", 20, 0) == 0);
  f.h.advance(100ms, 100ms);
  CHECK(beat("b", 20, 0) == 1);
  CHECK(beat("b", 20, 2) == 0);  // it arrived at once: no slower than before
  // Ten waits without a slower delivery: "lately" is over, and the wait is one second again.
  f.h.advance(10000ms, 100ms);
  f.hello("c", 30);  // version 3
  test::sent(*f.bridge);
  f.h.advance(1000ms, 100ms);
  CHECK(beat("c", 30, 0) == 1);
  CHECK(lists_sent(exposition, "late") == 2);
}

TEST_CASE("registry: with full_lists every member gets the whole list after each change (the baseline)") {
  RegistryConfig config = registry_config();
  config.full_lists = true;
  RegistryFixture f(config);
  auto& bridge = f.bridge;
  auto& view = f.view;
  f.hello("a", 10);
  f.hello("b", 20);
  auto peers = peers_by_endpoint(test::sent(*bridge));
  REQUIRE(peers.size() == 2);
  for (const auto& [_, p] : peers) {
    CHECK(p.full);
    CHECK(ids(p) == std::vector<std::string>{"a", "b"});
  }
  CHECK(view->entries().size() == 2);
}

TEST_CASE("registry: a member that misses its heartbeat deadline is expired and a delta drops it") {
  RegistryFixture f;
  f.hello("a", 10);
  f.hello("b", 20);
  f.heartbeat("a", 10);
  f.heartbeat("b", 20);
  test::sent(*f.bridge);
  // The limit is 3 x 100 ms. 'a' keeps beating, 'b' falls silent.
  for (int i = 0; i < 3; ++i) {
    f.h.advance(100ms, 100ms);
    f.heartbeat("a", 10);
    CHECK(test::of_type<protocol::Peers>(test::sent(*f.bridge)).empty());  // nobody expired yet
  }
  f.h.advance(100ms, 100ms);  // 'b' last seen 400 ms ago
  auto peers = peers_by_endpoint(test::sent(*f.bridge));
  REQUIRE(peers.size() == 1);  // only the remaining member is told
  REQUIRE(peers.count("offline://a") == 1);
  CHECK_FALSE(peers["offline://a"].full);
  CHECK(peers["offline://a"].peers.empty());
  CHECK(peers["offline://a"].left == std::vector<std::string>{"b"});
  CHECK(f.view->entries().size() == 1);
  // The expired member's next HEARTBEAT is answered with unknown_peer, on the socket it came from.
  f.heartbeat("b", 20);
  auto out = test::sent(*f.bridge);
  REQUIRE(out.size() == 1);
  CHECK(out[0].reply);
  CHECK(out[0].to == "b");
  REQUIRE(out[0].as<protocol::ErrorReply>());
  CHECK(out[0].as<protocol::ErrorReply>()->code == ErrorCode::unknown_peer);
  CHECK(out[0].as<protocol::ErrorReply>()->in_reply_to == uint16_t(MessageType::heartbeat));
}

TEST_CASE(
    "registry: after its own process stalled, nobody expires and the view shows everyone as just heard") {
  RegistryFixture f;
  f.hello("a", 10);
  f.heartbeat("a", 10);
  test::sent(*f.bridge);
  const auto heard = f.h.now();
  // One jump of 1 s: the registry's tick comes 10 heartbeat intervals late, as after a SIGSTOP of it.
  f.h.advance(1000ms, 1000ms);
  CHECK(test::of_type<protocol::Peers>(test::sent(*f.bridge)).empty());  // nobody expired
  const auto entries = f.view->entries();
  REQUIRE(entries.size() == 1);
  CHECK(entries[0].last_seen >= heard + 1000ms);  // not 1 s stale in /v1/instances
}

TEST_CASE(
    "registry: a HELLO with a new incarnation is a restart, the old incarnation's messages are refused") {
  RegistryFixture f;
  f.hello("a", 10);
  f.hello("b", 20);
  test::sent(*f.bridge);
  f.hello("b", 21);
  auto peers = peers_by_endpoint(test::sent(*f.bridge));
  REQUIRE(peers.size() == 2);
  CHECK_FALSE(peers["offline://a"].full);
  REQUIRE(peers["offline://a"].peers.size() == 1);
  CHECK(peers["offline://a"].peers.at(0).incarnation == 21);
  CHECK(peers["offline://b"].full);  // the restarted member starts from the whole list
  // The old incarnation's GOODBYE does not remove the new one; its HEARTBEAT is unknown.
  test::deliver(*f.bridge, "b", 20, protocol::Goodbye{"late"});
  f.h.run();
  CHECK(test::of_type<protocol::Peers>(test::sent(*f.bridge)).empty());
  f.heartbeat("b", 20);
  auto err = test::sent(*f.bridge);
  REQUIRE(err.size() == 1);
  CHECK(err[0].as<protocol::ErrorReply>()->code == ErrorCode::unknown_peer);
  // The new incarnation's GOODBYE does.
  test::deliver(*f.bridge, "b", 21, protocol::Goodbye{"bye"});
  f.h.run();
  auto after = peers_by_endpoint(test::sent(*f.bridge));
  REQUIRE(after.size() == 1);
  CHECK(after["offline://a"].left == std::vector<std::string>{"b"});
}

// A full PEERS list of `version` from the registry.
protocol::Peers full_list(uint64_t version, std::vector<protocol::PeerInfo> peers) {
  protocol::Peers p;
  p.version = version;
  p.peers = std::move(peers);
  return p;
}

// A stand-in for the role: records the PeerChanges membership sends it.
struct RoleProbe {
  std::shared_ptr<std::vector<PeerChanges>> got = std::make_shared<std::vector<PeerChanges>>();
  caf::actor spawn(caf::actor_system& sys) {
    // The state goes in as an argument: CAF 0.17 dereferences a null argument tuple when a function actor
    // takes none (UBSan reports it).
    return sys.spawn(
        [](std::shared_ptr<std::vector<PeerChanges>> got) -> caf::behavior {
          return {[got](PeerChanges& pc) { got->push_back(pc); }};
        },
        got);
  }
};

struct MembershipFixture {
  test::Harness h;
  BridgePtr bridge = h.offline_bridge("decode-0", 1000);
  std::shared_ptr<LoadGauge> load = std::make_shared<LoadGauge>();
  RoleProbe probe;
  caf::actor role = h.keep(probe.spawn(h.system()));
  caf::actor membership;

  std::unique_ptr<transport::Engine> engine;

  // With `engine`, the member holds a real data-plane engine (tcp on loopback), as roles do.
  explicit MembershipFixture(bool with_engine = false) {
    MembershipConfig mc;
    mc.registry_endpoint = "offline://router";
    mc.role = "decode";
    mc.heartbeat_interval = 100ms;
    mc.kv_pages_total = 8;
    if (with_engine) {
      transport::EngineConfig ec;
      ec.instance_id = "decode-0";
      ec.offer = {"tcp"};
      auto made = transport::Engine::create(ec);
      REQUIRE(made);
      engine = std::move(made).value();
      mc.engine = engine.get();
    }
    membership = h.keep(spawn_membership(h.system(), bridge, mc, load, role));
    h.run();
  }
  // Registers: HELLO_ACK and a PEERS listing `peers` (plus ourselves).
  void register_with(std::vector<protocol::PeerInfo> peers) {
    test::deliver(*bridge, "router", 1,
                  protocol::HelloAck{true, "", 100, protocol::current_protocol_identity()});
    peers.push_back(test::peer("decode-0", "decode", bridge->incarnation()));
    test::deliver(*bridge, "router", 1, full_list(1, peers));
    h.run();
  }
};

TEST_CASE("membership: HELLO until acknowledged, then heartbeats carrying the load gauge") {
  MembershipFixture f;
  auto out = test::sent(*f.bridge);
  std::string to;
  const auto hello = test::only<protocol::Hello>(out, &to);
  CHECK(to == "offline://router");
  CHECK(hello.role == "decode");
  CHECK(hello.control_endpoint == "offline://decode-0");
  CHECK(hello.kv_pages_total == 8);
  CHECK(out.at(0).env.incarnation == 1000);

  f.h.advance(100ms, 100ms);  // no ACK yet: the tick says HELLO again
  test::only<protocol::Hello>(test::sent(*f.bridge));

  f.register_with({test::peer("router", "router", 1), test::peer("prefill-0", "prefill", 7)});
  REQUIRE(f.probe.got->size() == 1);  // the role hears who joined
  CHECK(f.probe.got->at(0).changes.size() == 3);
  CHECK(f.bridge->peers().alive("prefill-0"));

  f.load->free_kv_pages = 5;
  f.load->total_kv_pages = 8;
  f.load->active_rooms = 2;
  f.load->quarantined_pages = 1;
  f.h.advance(100ms, 100ms);
  auto beats = test::sent(*f.bridge);
  const auto hb = test::only<protocol::Heartbeat>(beats);
  CHECK(test::of_type<protocol::Hello>(beats).empty());
  CHECK(hb.load.healthy);  // has its PEERS and the gauge is healthy
  CHECK(hb.load.free_kv_pages == 5);
  CHECK(hb.load.total_kv_pages == 8);
  CHECK(hb.load.active_rooms == 2);
  CHECK(hb.load.quarantined_pages == 1);
  f.load->healthy = false;
  f.h.advance(100ms, 100ms);
  CHECK_FALSE(test::only<protocol::Heartbeat>(test::sent(*f.bridge)).load.healthy);
}

TEST_CASE("membership: unknown_peer about a HEARTBEAT forgets peers, tells the role, drains, rejoins fresh") {
  MembershipFixture f;
  f.register_with({test::peer("router", "router", 1), test::peer("prefill-0", "prefill", 7)});
  f.probe.got->clear();
  test::sent(*f.bridge);
  f.load->writes_in_flight = 1;  // a write of ours still in flight

  test::deliver(
      *f.bridge, "router", 1,
      protocol::ErrorReply{ErrorCode::unknown_peer, "not registered", uint16_t(MessageType::heartbeat), 0});
  f.h.run();
  CHECK_FALSE(f.bridge->peers().find("prefill-0").has_value());
  REQUIRE(f.probe.got->size() == 1);
  bool saw_prefill = false;
  for (const auto& c : f.probe.got->at(0).changes) {
    CHECK(c.new_incarnation == 0);  // every peer is gone to us
    if (c.id == "prefill-0") saw_prefill = c.old_incarnation == 7;
  }
  CHECK(saw_prefill);

  // While a write is in flight: no HELLO, no HEARTBEAT, old incarnation kept.
  f.h.advance(300ms, 2ms);
  auto out = test::sent(*f.bridge);
  CHECK(test::of_type<protocol::Hello>(out).empty());
  CHECK(test::of_type<protocol::Heartbeat>(out).empty());
  CHECK(f.bridge->incarnation() == 1000);
  // A PEERS addressed to the incarnation we are leaving is ignored.
  test::deliver(*f.bridge, "router", 1, full_list(9, {test::peer("prefill-0", "prefill", 7)}));
  f.h.run();
  CHECK_FALSE(f.bridge->peers().find("prefill-0").has_value());

  f.load->writes_in_flight = 0;
  f.h.advance(2ms, 2ms);  // the next drain poll
  out = test::sent(*f.bridge);
  const auto hello = test::only<protocol::Hello>(out);
  CHECK(hello.role == "decode");
  CHECK(f.bridge->incarnation() > 1000);
  CHECK(test::of_type<protocol::Hello>(out).front()->env.incarnation == f.bridge->incarnation());
}

TEST_CASE("membership: a rejoin rotates the segment token and HELLO carries the new descriptor") {
  MembershipFixture f(true);
  const auto first = test::only<protocol::Hello>(test::sent(*f.bridge));
  REQUIRE(first.segment);
  const uint64_t old_token = first.segment->token;
  CHECK(old_token == f.engine->token());
  f.register_with({test::peer("router", "router", 1)});
  test::sent(*f.bridge);

  test::deliver(
      *f.bridge, "router", 1,
      protocol::ErrorReply{ErrorCode::unknown_peer, "not registered", uint16_t(MessageType::heartbeat), 0});
  f.h.run();
  f.h.advance(2ms, 2ms);  // nothing in flight: the first drain poll rejoins
  const auto hello = test::only<protocol::Hello>(test::sent(*f.bridge));
  REQUIRE(hello.segment);
  CHECK(hello.segment->token != old_token);
  CHECK(hello.segment->token == f.engine->token());
  CHECK(hello.segment->instance_id == "decode-0");
  CHECK(hello.segment->backends.count("tcp") == 1);
}

TEST_CASE("membership: a PeerEvent (connection lost) marks the peer dead and tells the role at once") {
  MembershipFixture f;
  f.register_with({test::peer("prefill-0", "prefill", 7)});
  f.probe.got->clear();
  caf::anon_send(f.membership, PeerEvent{"prefill-0", "offline://prefill-0", 7, 0, "test"});
  f.h.run();
  CHECK_FALSE(f.bridge->peers().alive("prefill-0"));
  REQUIRE(f.probe.got->size() == 1);
  REQUIRE(f.probe.got->at(0).changes.size() == 1);
  CHECK(f.probe.got->at(0).changes[0].old_incarnation == 7);
  // Still listed by the registry after (misses + 2) intervals: the peer is used again.
  f.h.advance(500ms, 100ms);
  CHECK(f.bridge->peers().alive("prefill-0"));
}

// A PEERS delta of `version` from the registry.
protocol::Peers delta(uint64_t version, std::vector<protocol::PeerInfo> upserts,
                      std::vector<std::string> left = {}) {
  protocol::Peers p;
  p.version = version;
  p.full = false;
  p.peers = std::move(upserts);
  p.left = std::move(left);
  return p;
}

TEST_CASE("membership: deltas apply in order - join then restart then leave") {
  MembershipFixture f;
  f.register_with({test::peer("router", "router", 1)});
  f.probe.got->clear();

  test::deliver(*f.bridge, "router", 1, delta(2, {test::peer("prefill-0", "prefill", 7)}));
  test::deliver(*f.bridge, "router", 1, delta(3, {test::peer("prefill-0", "prefill", 8)}));
  test::deliver(*f.bridge, "router", 1, delta(4, {}, {"prefill-0"}));
  test::deliver(*f.bridge, "router", 1, delta(5, {test::peer("encoder-0", "encoder", 9)}));
  f.h.run();
  CHECK(f.bridge->peers().version() == 5);
  CHECK_FALSE(f.bridge->peers().find("prefill-0").has_value());
  CHECK(f.bridge->peers().alive("encoder-0"));
  CHECK(f.bridge->peers().alive("router"));
  REQUIRE(f.probe.got->size() == 4);  // one PeerChanges per delta, as with full lists
  const auto& joined = f.probe.got->at(0).changes.at(0);
  CHECK((joined.id == "prefill-0" && joined.old_incarnation == 0 && joined.new_incarnation == 7));
  const auto& restarted = f.probe.got->at(1).changes.at(0);
  CHECK((restarted.old_incarnation == 7 && restarted.new_incarnation == 8));
  const auto& left = f.probe.got->at(2).changes.at(0);
  CHECK((left.id == "prefill-0" && left.old_incarnation == 8 && left.new_incarnation == 0));
  // A stale delta (its version already applied) changes nothing.
  test::deliver(*f.bridge, "router", 1, delta(4, {}, {"encoder-0"}));
  f.h.run();
  CHECK(f.bridge->peers().alive("encoder-0"));
  CHECK(f.probe.got->size() == 4);
}

TEST_CASE("membership: a lost delta makes it ask for the full list at once and resync from it") {
  MembershipFixture f;
  f.register_with({test::peer("router", "router", 1), test::peer("prefill-0", "prefill", 7)});
  f.h.advance(100ms, 100ms);
  CHECK_FALSE(test::only<protocol::Heartbeat>(test::sent(*f.bridge)).resync);
  f.probe.got->clear();

  // Version 2 never arrives; 3 says encoder-0 joined. It is not applied, and a HEARTBEAT asks for the list.
  test::deliver(*f.bridge, "router", 1, delta(3, {test::peer("encoder-0", "encoder", 9)}));
  f.h.run();
  CHECK_FALSE(f.bridge->peers().find("encoder-0").has_value());
  CHECK(f.bridge->peers().version() == 1);
  CHECK(f.probe.got->empty());
  CHECK(test::only<protocol::Heartbeat>(test::sent(*f.bridge)).resync);
  // Until the full list comes, later deltas are not applied either and every HEARTBEAT keeps asking.
  test::deliver(*f.bridge, "router", 1, delta(4, {}, {"prefill-0"}));
  f.h.advance(100ms, 100ms);
  CHECK(test::only<protocol::Heartbeat>(test::sent(*f.bridge)).resync);
  CHECK(f.bridge->peers().find("prefill-0").has_value());

  // The full list (version 4: the lost delta 2 restarted prefill-0, 3 and 4 as above) replaces the view.
  test::deliver(*f.bridge, "router", 1,
                full_list(4, {test::peer("router", "router", 1), test::peer("encoder-0", "encoder", 9),
                              test::peer("decode-0", "decode", f.bridge->incarnation())}));
  f.h.run();
  CHECK(f.bridge->peers().version() == 4);
  CHECK(f.bridge->peers().alive("encoder-0"));
  CHECK_FALSE(f.bridge->peers().find("prefill-0").has_value());
  REQUIRE(f.probe.got->size() == 1);  // the role hears the net changes: prefill-0 gone, encoder-0 joined
  CHECK(f.probe.got->at(0).changes.size() == 2);
  f.h.advance(100ms, 100ms);
  CHECK_FALSE(test::only<protocol::Heartbeat>(test::sent(*f.bridge)).resync);
  // And the next delta applies on top of it.
  test::deliver(*f.bridge, "router", 1, delta(5, {}, {"encoder-0"}));
  f.h.run();
  CHECK_FALSE(f.bridge->peers().find("encoder-0").has_value());
}

TEST_CASE(
    "membership: a delta before the full list is ignored and HEARTBEATs ask for the list until it comes") {
  MembershipFixture f;
  test::deliver(*f.bridge, "router", 1,
                protocol::HelloAck{true, "", 100, protocol::current_protocol_identity()});
  test::deliver(*f.bridge, "router", 1, delta(1, {test::peer("prefill-0", "prefill", 7)}));
  f.h.run();
  CHECK_FALSE(f.bridge->peers().find("prefill-0").has_value());
  f.h.advance(100ms, 100ms);
  const auto hb = test::only<protocol::Heartbeat>(test::sent(*f.bridge));
  CHECK_FALSE(hb.load.healthy);  // no full list yet: not placeable
  CHECK(hb.resync);              // a tick later it is overdue (lost): ask for it
  CHECK(hb.peers_version == 0);  // it holds no version the registry could compare
  test::deliver(*f.bridge, "router", 1, full_list(2, {test::peer("prefill-0", "prefill", 7)}));
  f.h.advance(100ms, 100ms);
  const auto listed = test::only<protocol::Heartbeat>(test::sent(*f.bridge));
  CHECK_FALSE(listed.resync);
  CHECK(listed.peers_version == 2);  // the registry can tell whether it is behind
  CHECK(f.bridge->peers().alive("prefill-0"));
}

}  // namespace

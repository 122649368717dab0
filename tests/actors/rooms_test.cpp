#include <algorithm>
#include <catch2/catch.hpp>
#include <functional>

#include "cache/page_allocator.hpp"
#include "epd/actors/membership/peer_directory.hpp"
#include "epd/actors/room.hpp"

using namespace epd::actors;
using epd::protocol::ErrorCode;
using epd::protocol::KvState;
using epd::protocol::make_error;

TEST_CASE("room state only moves forward, Failed overrides and carries a reason", "[actors][room]") {
  RoomState r;
  CHECK(r.state() == KvState::bootstrapping);
  CHECK(r.advance(KvState::waiting_for_input));
  CHECK_FALSE(r.advance(KvState::waiting_for_input));  // repeated
  CHECK_FALSE(r.advance(KvState::bootstrapping));      // backwards
  CHECK_FALSE(r.advance(KvState::failed));             // failing needs a reason: fail()
  CHECK(r.advance(KvState::success));                  // skipping Transferring is allowed
  CHECK(r.terminal());
  CHECK_FALSE(r.fail(make_error(ErrorCode::timeout, "late")));  // terminal stays terminal
  CHECK(r.state() == KvState::success);

  RoomState f;
  CHECK(f.advance(KvState::transferring));
  CHECK(f.fail(make_error(ErrorCode::peer_died, "decode-0 died")));
  CHECK(f.state() == KvState::failed);
  CHECK(f.failure().code == ErrorCode::peer_died);
  CHECK(f.failure().detail == "decode-0 died");
  CHECK_FALSE(f.advance(KvState::success));
  CHECK_FALSE(f.fail(make_error(ErrorCode::timeout, "second")));
  CHECK(f.failure().code == ErrorCode::peer_died);

  RoomState g;
  CHECK(g.fail(epd::protocol::Error{ErrorCode::aborted, false, ""}));
  CHECK_FALSE(g.failure().detail.empty());  // a reason is always present
}

TEST_CASE("every forward path through the room states is accepted, every backward one refused",
          "[actors][room]") {
  const KvState order[] = {KvState::bootstrapping, KvState::waiting_for_input, KvState::transferring,
                           KvState::success};
  for (int from = 0; from < 4; ++from)
    for (int to = 0; to < 4; ++to) {
      RoomState r;
      for (int k = 1; k <= from; ++k) REQUIRE(r.advance(order[k]));
      INFO(from << " -> " << to);
      CHECK(r.advance(order[to]) == (to > from && from < 3));
    }
}

TEST_CASE("page allocator never hands a page out twice and refuses bad frees", "[actors][alloc]") {
  PageAllocator a(10);
  auto x = a.allocate(4);
  REQUIRE(x);
  CHECK(*x == std::vector<uint32_t>{0, 1, 2, 3});  // lowest first keeps runs contiguous
  auto y = a.allocate(6);
  REQUIRE(y);
  CHECK(a.free_count() == 0);
  CHECK_FALSE(a.allocate(1));
  CHECK(a.free(*x));
  CHECK_FALSE(a.free(*x));  // double free
  const std::vector<uint32_t> out_of_range{42};
  CHECK_FALSE(a.free(out_of_range));
  const std::vector<uint32_t> dup{4, 4};
  CHECK_FALSE(a.free(dup));
  CHECK(a.free_count() == 4);
  auto z = a.allocate(4);
  REQUIRE(z);
  std::vector<bool> seen(10);
  for (auto v : {*y, *z})
    for (auto p : v) {
      CHECK_FALSE(seen[p]);
      seen[p] = true;
    }
  CHECK(a.free_count() == 0);
  CHECK(a.allocate(0));  // zero pages is fine
}

TEST_CASE("peer directory reports joins, departures and restarts", "[actors][peers]") {
  using epd::protocol::PeerInfo;
  PeerDirectory d;
  auto p = [](std::string id, uint64_t inc) {
    PeerInfo i;
    i.instance_id = id;
    i.incarnation = inc;
    i.control_endpoint = "tcp://127.0.0.1:1";
    return i;
  };
  auto c1 = d.replace(1, {p("a", 1), p("b", 1)});
  CHECK(c1.size() == 2);
  auto c2 = d.replace(2, {p("a", 2), p("c", 1)});
  REQUIRE(c2.size() == 3);
  int restarted = 0, left = 0, joined = 0;
  for (auto& c : c2) {
    if (c.old_incarnation && c.new_incarnation)
      ++restarted;
    else if (c.old_incarnation)
      ++left;
    else
      ++joined;
  }
  CHECK(restarted == 1);
  CHECK(left == 1);
  CHECK(joined == 1);
  // Each change names the peer's role: as listed before, for one that left (its metrics label).
  PeerDirectory d2;
  auto r = [&](std::string id, uint64_t inc, std::string role) {
    auto i = p(id, inc);
    i.role = role;
    return i;
  };
  (void)d2.replace(1, {r("x", 1, "prefill"), r("y", 1, "decode")});
  auto delta = d2.apply_delta(2, {r("z", 1, "encoder")}, {"y"}).changes;
  REQUIRE(delta.size() == 2);
  CHECK((delta[0].id == "y" && delta[0].new_incarnation == 0 && delta[0].role == "decode"));
  CHECK((delta[1].id == "z" && delta[1].role == "encoder"));
  CHECK(d2.role_of("x") == "prefill");
  CHECK(d2.role_of("y") == "unknown");
  auto gone = d2.replace(3, {});
  REQUIRE(gone.size() == 2);
  CHECK((gone[0].role == "prefill" && gone[1].role == "encoder"));
  CHECK(d.replace(1, {}).empty());  // stale version ignored
  CHECK(d.find("a")->incarnation == 2);
  CHECK_FALSE(d.endpoint_of("b"));
  // What epd-bench membership asks thousands of directories: exactly these ids at these incarnations.
  CHECK(d.lists_exactly({{"a", 2}, {"c", 1}}));
  CHECK_FALSE(d.lists_exactly({{"a", 1}, {"c", 1}}));
  CHECK_FALSE(d.lists_exactly({{"a", 2}}));
  CHECK_FALSE(d.lists_exactly({{"a", 2}, {"b", 1}}));
  CHECK_FALSE(d.lists_exactly({{"a", 2}, {"c", 1}, {"d", 1}}));
}

// A directory holds what peers share (build identity, KV layout) once per distinct value, and a segment
// per peer: every descriptor must still come back whole, however many distinct values the fleet has (past
// the number it interns too), through every lookup and after deltas replace them.
TEST_CASE("peer directory gives every descriptor back whole whatever its peers share", "[actors][peers]") {
  using namespace epd::protocol;
  auto peer = [](int i, const std::string& build) {
    PeerInfo p;
    p.instance_id = "p" + std::to_string(i);
    p.role = i % 2 ? "prefill" : "decode";
    p.control_endpoint = "tcp://127.0.0.1:" + std::to_string(20000 + i);
    p.incarnation = 100 + i;
    p.identity = {7, 5, build, "tiny", std::string(64, char('a' + i % 3))};
    if (i % 3 == 0) p.kv_layout = KvLayout{uint32_t(2 + i % 4), 4, 64, 16, 32};
    if (i % 4 == 0) {
      SegmentDescriptor seg;
      seg.instance_id = p.instance_id;
      seg.host_id = "host-" + std::to_string(i);
      seg.incarnation = p.incarnation;
      seg.token = 9000 + i;
      seg.backends["tcp"] = {uint8_t(i), 2, 3};
      p.segment = seg;
    }
    return p;
  };
  std::vector<PeerInfo> fleet;
  for (int i = 0; i < 60; ++i) fleet.push_back(peer(i, i < 20 ? "shared" : "g" + std::to_string(i)));
  PeerDirectory d;
  d.replace(1, fleet);
  for (const auto& p : fleet) {
    CHECK(d.find(p.instance_id) == p);
    CHECK(d.find_by_endpoint(p.control_endpoint) == p);
  }
  CHECK(d.with_role("prefill").size() == 30);
  for (const auto& p : d.with_role("decode")) CHECK(p == fleet[std::stoi(p.instance_id.substr(1))]);
  // Deltas give half the fleet another build and layout; the rest keep theirs.
  std::vector<PeerInfo> changed;
  for (int i = 0; i < 60; i += 2) {
    auto p = peer(i, "next");
    p.incarnation += 1000;
    p.kv_layout = KvLayout{8, 8, 128, 16, 64};
    changed.push_back(p);
    fleet[i] = p;
  }
  REQUIRE_FALSE(d.apply_delta(2, changed, {}).gap);
  for (const auto& p : fleet) CHECK(d.find(p.instance_id) == p);
  // lists(): what etcd membership asks of every record it is sent again (the directory is its only copy),
  // so every field counts, not only the incarnation.
  for (const auto& p : fleet) CHECK(d.lists(p));
  CHECK(d.all() == [&] {
    auto sorted = fleet;
    std::sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.instance_id < b.instance_id; });
    return sorted;
  }());
  const std::vector<std::function<void(PeerInfo&)>> edits = {
      [](PeerInfo& p) { p.instance_id = "elsewhere"; },
      [](PeerInfo& p) { p.role = "encoder"; },
      [](PeerInfo& p) { p.control_endpoint = "tcp://127.0.0.1:1"; },
      [](PeerInfo& p) { ++p.incarnation; },
      [](PeerInfo& p) { p.identity.build = "other"; },
      [](PeerInfo& p) {
        p.kv_layout = KvLayout{1, 1, 1, 1, 1};
      },
      [](PeerInfo& p) { p.segment.reset(); },
      [](PeerInfo& p) { p.segment->token += 1; },
  };
  for (size_t e = 0; e < edits.size(); ++e) {
    auto p = fleet[0];  // has a segment and a layout
    REQUIRE(p.segment);
    edits[e](p);
    INFO("edit " << e);
    CHECK_FALSE(d.lists(p));
  }
  auto without = fleet[1];  // has no segment: one given is a difference too
  REQUIRE_FALSE(without.segment);
  without.segment = fleet[0].segment;
  CHECK_FALSE(d.lists(without));
}

// The role kernel's pieces in isolation: RoomTable tombstones, MessageTable subscription and dispatch,
// SettingsSchema keys/defaults/errors, and the incarnation rules of the peer-loss sweep.
#include <catch2/catch.hpp>

#include "epd/actors/kernel/role_kernel.hpp"
#include "epd/config/cluster_config.hpp"
#include "role_harness.hpp"

using namespace epd;
using namespace epd::actors;
using protocol::ErrorCode;

namespace {

TEST_CASE("RoomTable keeps at most N tombstones, oldest evicted first, with how each room ended") {
  kernel::RoomTable<int> t(2);
  for (uint64_t id : {1, 2, 3}) t.insert(id, int(id));
  t.end(1);
  t.end(2, protocol::make_error(ErrorCode::peer_died, "gone"));
  REQUIRE(t.size() == 1);
  REQUIRE(t.ended(1) != nullptr);
  CHECK(t.ended(1)->code == ErrorCode::ok);
  t.end(3);
  CHECK(t.ended(1) == nullptr);  // evicted: the bound is 2
  REQUIRE(t.ended(2) != nullptr);
  CHECK(t.ended(2)->code == ErrorCode::peer_died);
  REQUIRE(t.ended(3) != nullptr);
  CHECK(t.empty());
  // Ending an id again updates its outcome without taking a second place in the bound.
  t.end(3, protocol::make_error(ErrorCode::aborted, "again"));
  CHECK(t.ended(2) != nullptr);
  CHECK(t.ended(3)->code == ErrorCode::aborted);
  // take() removes without a tombstone.
  t.insert(7, 7);
  CHECK(t.take(7) == 7);
  CHECK(t.ended(7) == nullptr);
  kernel::RoomTable<int> none(0);
  none.insert(1, 1);
  none.end(1);
  CHECK(none.ended(1) == nullptr);
}

struct Counts {
  int submits = 0;
  int cancels = 0;
  uint64_t last_room = 0;
};

TEST_CASE("MessageTable dispatches each type to its handler and subscribes exactly the handled types") {
  test::Harness h;
  auto bridge = h.offline_bridge("t", 1);
  auto target = h.keep(h.system().spawn(test::envelope_sink, 0));
  kernel::MessageTable<Counts> table;
  table
      .on<protocol::Submit>([](Counts& c, const protocol::Envelope&, protocol::Submit& s) {
        ++c.submits;
        c.last_room = s.room;
      })
      .on<protocol::Cancel>([](Counts& c, const protocol::Envelope&, protocol::Cancel&) { ++c.cancels; });
  Counts c;
  protocol::Submit s;
  s.room = 42;
  protocol::Envelope env{"x", 1, s};
  table.dispatch(c, env);
  protocol::Envelope cancel{"x", 1, protocol::Cancel{42, "no"}};
  table.dispatch(c, cancel);
  protocol::Envelope other{"x", 1, protocol::AbortAck{42}};
  table.dispatch(c, other);  // no handler: nothing runs
  CHECK(c.submits == 1);
  CHECK(c.cancels == 1);
  CHECK(c.last_room == 42);

  REQUIRE(table.subscribe(*bridge, target).ok());
  // A type taken by another actor of the process is a start-up error.
  auto other_actor = h.keep(h.system().spawn(test::envelope_sink, 0));
  auto clash = table.subscribe(*bridge, other_actor);
  REQUIRE_FALSE(clash.ok());
  CHECK(clash.error().code == ErrorCode::config_error);
  CHECK_THAT(clash.error().detail, Catch::Contains("already handled"));
}

TEST_CASE("MessageTable refuses a type with two handlers at subscribe") {
  test::Harness h;
  auto bridge = h.offline_bridge("t", 1);
  auto target = h.keep(h.system().spawn(test::envelope_sink, 0));
  kernel::MessageTable<Counts> table;
  table.on<protocol::Submit>([](Counts&, const protocol::Envelope&, protocol::Submit&) {})
      .on<protocol::Submit>([](Counts&, const protocol::Envelope&, protocol::Submit&) {});
  auto st = table.subscribe(*bridge, target);
  REQUIRE_FALSE(st.ok());
  CHECK(st.error().code == ErrorCode::config_error);
  CHECK_THAT(st.error().detail, Catch::Contains("SUBMIT") && Catch::Contains("two handlers"));
}

struct Knobs {
  uint32_t pages = 64;
  std::chrono::milliseconds wait{250};
  std::string name = "default";
};

kernel::SettingsSchema<Knobs> knobs_schema() {
  kernel::SettingsSchema<Knobs> s;
  s.u32("pages", &Knobs::pages, 1, 100).ms("wait_ms", &Knobs::wait).str("name", &Knobs::name);
  return s;
}

config::ClusterConfig cluster_with(const std::string& instance_keys) {
  auto cfg = config::parse_cluster_config(R"(
[cluster]
registry = "r"
[[instance]]
id = "r"
role = "echo"
control = "tcp://127.0.0.1:17990"
)" + instance_keys,
                                          "kernel_test.toml");
  REQUIRE(cfg.ok());
  return *cfg;
}

TEST_CASE("SettingsSchema: the keys it declares, defaults from the fields, bound errors naming the key") {
  const auto schema = knobs_schema();
  CHECK(schema.keys() == std::vector<std::string_view>{"pages", "wait_ms", "name"});
  RoleContext ctx;

  auto none = cluster_with("");
  auto d = schema.read(ctx, none.instances.at(0).settings);
  REQUIRE(d.ok());
  CHECK(d->pages == 64);
  CHECK(d->wait == std::chrono::milliseconds(250));
  CHECK(d->name == "default");

  auto set = cluster_with("pages = 7\nwait_ms = 9\nname = \"x\"\n");
  auto v = schema.read(ctx, set.instances.at(0).settings);
  REQUIRE(v.ok());
  CHECK(v->pages == 7);
  CHECK(v->wait == std::chrono::milliseconds(9));
  CHECK(v->name == "x");

  auto high = cluster_with("pages = 101\n");
  auto e = schema.read(ctx, high.instances.at(0).settings);
  REQUIRE_FALSE(e.ok());
  CHECK(e.error().code == ErrorCode::config_error);
  CHECK_THAT(e.error().detail, Catch::Contains("'pages'") && Catch::Contains("[1, 100]"));

  auto typed = cluster_with("wait_ms = \"soon\"\n");
  auto t = schema.read(ctx, typed.instances.at(0).settings);
  REQUIRE_FALSE(t.ok());
  CHECK_THAT(t.error().detail, Catch::Contains("'wait_ms'"));
}

struct Entry {
  std::vector<kernel::SharedPeer> peers;
  std::vector<kernel::SharedPeer> shared_peers() const { return peers; }
};

TEST_CASE("sharing_lost_peer ends exactly the entries placed on the lost incarnation") {
  std::map<uint64_t, Entry> table;
  table[1].peers = {{"p", 5}};           // placed on incarnation 5
  table[2].peers = {{"p", 6}};           // placed on a later incarnation
  table[3].peers = {{"p", 0}};           // placed before anything was heard of p: any loss of p ends it
  table[4].peers = {{"q", 5}};           // another peer
  table[5].peers = {{"", 5}, {"p", 5}};  // an unnamed peer never matches, the named one does
  auto ids = [&](PeerDirectory::Change c) { return kernel::sharing_lost_peer(table, c); };
  CHECK(ids({"p", 5, 6}) == std::vector<uint64_t>{1, 3, 5});  // p restarted 5 -> 6
  CHECK(ids({"p", 5, 0}) == std::vector<uint64_t>{1, 3, 5});  // p (5) is gone
  CHECK(ids({"p", 6, 0}) == std::vector<uint64_t>{2, 3});
  CHECK(ids({"p", 0, 7}).empty());  // a join loses nothing
  CHECK(ids({"r", 5, 0}).empty());
  auto e = kernel::peer_lost_error({"p", 5, 6});
  CHECK(e.code == ErrorCode::peer_died);
  CHECK_THAT(e.detail, Catch::Contains("'p'") && Catch::Contains("5") && Catch::Contains("restarted"));
}

}  // namespace

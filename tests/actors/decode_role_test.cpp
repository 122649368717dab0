// The decode role under CAF's test coordinator, spawned exactly as the runner spawns it (builtin_roles()),
// with an offline bridge and an in-process tcp transfer engine (no bytes move: the engine only allocates the
// KV pool and keeps the write grants). Prefill and router are played by the test.
#include <catch2/catch.hpp>

#include "epd/actors/membership/membership.hpp"
#include "epd/actors/role_registry.hpp"
#include "epd/config/cluster_config.hpp"
#include "epd/model/config.hpp"
#include "epd/model/kv_cache.hpp"
#include "role_harness.hpp"

using namespace epd;
using namespace epd::actors;
using namespace std::chrono_literals;
using protocol::ErrorCode;
using protocol::MessageType;

namespace {

using test::kRouterInc, test::kPrefillInc, test::kDecodeInc;

constexpr const char* kSixteenPages = "kv_pages = 16\n";

// The cluster with decode's pool given by `pool_keys` (kv_pages or kv_memory_mb).
std::string decode_cluster(const std::string& pool_keys) {
  return R"(
[cluster]
registry = "router"
[model]
preset = "tiny"
[transport]
backend = "tcp"
host = "127.0.0.1"
[defaults.decode]
)" + pool_keys +
         R"(aux_slots = 4
waiting_timeout_ms = 1000
abort_timeout_ms = 500
staging_ring_bytes = 0
[[instance]]
id = "router"
role = "router"
control = "tcp://127.0.0.1:17990"
[[instance]]
id = "prefill-0"
role = "prefill"
control = "tcp://127.0.0.1:17991"
[[instance]]
id = "decode-0"
role = "decode"
control = "tcp://127.0.0.1:17992"
)";
}

struct DecodeFixture {
  test::Harness h;
  config::ClusterConfig cluster;
  std::unique_ptr<transport::Engine> engine;
  BridgePtr bridge = h.offline_bridge("decode-0", kDecodeInc);
  RoleContext ctx;
  caf::actor role;

  protocol::Status spawned;  // the spawn's outcome, when the test lets it fail

  explicit DecodeFixture(const std::string& pool_keys = kSixteenPages, bool must_start = true) {
    auto cfg = config::parse_cluster_config(decode_cluster(pool_keys), "decode_role_test.toml");
    REQUIRE(cfg.ok());
    cluster = std::move(cfg.value());
    const auto* inst = cluster.find("decode-0");
    auto ec = config::engine_config_for(*inst);
    REQUIRE(ec.ok());
    ec->incarnation = kDecodeInc;
    auto e = transport::Engine::create(*ec);
    REQUIRE(e.ok());
    engine = std::move(e.value());
    auto model = model::preset("tiny");
    REQUIRE(model.ok());
    ctx.system = &h.system();
    ctx.cluster = &cluster;
    ctx.instance = inst;
    ctx.bridge = bridge;
    ctx.engine = engine.get();
    ctx.model = *model;
    // The registry's PEERS, as membership would have applied it.
    (void)bridge->peers().replace(
        1, {test::peer("router", "router", kRouterInc), test::peer("prefill-0", "prefill", kPrefillInc),
            test::peer("decode-0", "decode", kDecodeInc)});
    auto handle = builtin_roles().find("decode")->spawn(ctx);
    if (!must_start && !handle) {
      spawned = handle.error();
      return;
    }
    REQUIRE(handle.ok());
    role = h.keep(handle->main);
    h.run();
    if (pool_keys == kSixteenPages) REQUIRE(ctx.load->free_kv_pages == 16);
  }
  ~DecodeFixture() { h.shutdown(); }

  // SUBMIT from the router (prompt of `tokens` tokens, `max_tokens` new), run, and return what was sent.
  std::vector<test::Sent> submit(uint64_t room, uint32_t tokens = 20, uint32_t max_tokens = 10) {
    protocol::Submit s;
    s.room = room;
    s.prompt.assign(tokens, 65);
    s.max_tokens = max_tokens;
    s.prefill = "prefill-0";
    test::deliver(*bridge, "router", kRouterInc, s);
    h.run();
    return test::sent(*bridge);
  }
  void from_prefill(protocol::Body body, uint64_t incarnation = kPrefillInc) {
    test::deliver(*bridge, "prefill-0", incarnation, std::move(body));
    h.run();
  }
  uint32_t free_pages() const { return ctx.load->free_kv_pages.load(); }
};

// 20 prompt + 10 new tokens in 16-token pages: 2 pages held, both written by prefill (prompt pages).
constexpr uint32_t kRoomPages = 2;

TEST_CASE("decode: SUBMIT allocates pages and sends BOOTSTRAP with the prompt pages and a fence") {
  DecodeFixture f;
  auto out = f.submit(5);
  std::string to;
  const auto b = test::only<protocol::Bootstrap>(out, &to);
  CHECK(to == "offline://prefill-0");
  CHECK(b.room == 5);
  CHECK(b.prompt_len == 20);
  CHECK(b.dst_pages.size() == 2);
  CHECK(b.fence != 0);
  CHECK(out.size() == 1);  // nothing to the router yet
  CHECK(f.free_pages() == 16 - kRoomPages);
  CHECK(f.ctx.load->active_rooms == 1);

  // The same room id again is refused with a RESULT to its sender, and allocates nothing.
  auto again = f.submit(5);
  const auto r = test::only<protocol::RoomResult>(again, &to);
  CHECK(to == "offline://router");
  CHECK_FALSE(r.ok);
  CHECK(r.code == ErrorCode::invalid_request);
  CHECK(f.free_pages() == 16 - kRoomPages);

  // More pages than are free: out_of_capacity (retryable: they free up), nothing leaks.
  auto busy = f.submit(7, 200, 40);  // 15 pages of 16-token pages, 14 free
  CHECK(test::only<protocol::RoomResult>(busy).code == ErrorCode::out_of_capacity);
  CHECK(f.free_pages() == 16 - kRoomPages);
  // More pages than the pool holds: the request's fault, never placed by a retry; nothing leaks.
  auto big = f.submit(6, 900, 100);
  const auto never = test::only<protocol::RoomResult>(big);
  CHECK(never.code == ErrorCode::invalid_request);
  CHECK_THAT(never.reason, Catch::Contains("need 63 KV pages") && Catch::Contains("holds 16 in all"));
  CHECK(f.free_pages() == 16 - kRoomPages);
}

TEST_CASE("decode: kv_memory_mb sizes the pool in whole pages of its layout, alone and in range") {
  const auto tiny = model::preset("tiny");
  REQUIRE(tiny.ok());
  for (const char* dtype : {"f32", "f16"}) {
    INFO(dtype);
    DecodeFixture f(std::string("kv_memory_mb = 1\nkv_dtype = \"") + dtype + "\"\n");
    const auto layout = model::kv_layout_for(*tiny, 1, *model::parse_dtype(dtype));
    const uint64_t page = layout.page_bytes() * layout.layers * 2;
    CHECK(f.free_pages() == (uint64_t{1} << 20) / page);  // f16 holds twice the pages of f32
  }
  DecodeFixture both("kv_pages = 16\nkv_memory_mb = 1\n", false);
  CHECK(both.spawned.error().code == ErrorCode::config_error);
  CHECK(both.spawned.error().detail.find("kv_pages and kv_memory_mb both set") != std::string::npos);
  DecodeFixture huge("kv_memory_mb = 1000000\n", false);  // 1 TB of tiny pages: more than a pool takes
  CHECK(huge.spawned.error().detail.find("the pool takes 1..16777216") != std::string::npos);
}

TEST_CASE("decode: KV_STATUS Failed -> RESULT failed to the router with the cause, pages freed") {
  DecodeFixture f;
  f.submit(5);
  protocol::KvStatus kv;
  kv.room = 5;
  kv.state = protocol::KvState::failed;
  kv.code = ErrorCode::transfer_failed;
  kv.reason = "lane broke";
  f.from_prefill(kv);
  auto out = test::sent(*f.bridge);
  std::string to;
  const auto r = test::only<protocol::RoomResult>(out, &to);
  CHECK(to == "offline://router");
  CHECK(r.room == 5);
  CHECK_FALSE(r.ok);
  CHECK(r.code == ErrorCode::transfer_failed);
  CHECK_THAT(r.reason, Catch::Contains("prefill-0") && Catch::Contains("lane broke"));
  CHECK(test::of_type<protocol::Abort>(out).empty());  // prefill failed it itself: writes nothing more
  CHECK(f.free_pages() == 16);
  CHECK(f.ctx.load->quarantined_pages == 0);
  CHECK(f.ctx.load->active_rooms == 0);

  // A KV_STATUS from another incarnation of the prefill does not touch a room.
  f.submit(6);
  kv.room = 6;
  f.from_prefill(kv, kPrefillInc + 1);
  auto stale = test::sent(*f.bridge);
  CHECK(test::of_type<protocol::RoomResult>(stale).empty());
  CHECK(f.free_pages() == 16 - kRoomPages);
}

TEST_CASE(
    "decode: waiting_timeout -> RESULT to the router, ABORT to prefill, pages quarantined until ABORT_ACK") {
  DecodeFixture f;
  f.submit(5);
  f.h.advance(999ms, 999ms);
  CHECK(test::sent(*f.bridge).empty());  // not yet
  f.h.advance(1ms);
  auto out = test::sent(*f.bridge);
  const auto r = test::only<protocol::RoomResult>(out);
  CHECK(r.code == ErrorCode::waiting_timeout);
  std::string to;
  const auto abort = test::only<protocol::Abort>(out, &to);
  CHECK(to == "offline://prefill-0");
  CHECK(abort.room == 5);
  CHECK(f.ctx.load->quarantined_pages == kRoomPages);
  CHECK(f.free_pages() == 16 - kRoomPages);
  CHECK(f.ctx.load->active_rooms == 0);

  // The abort timeout passes without an answer: the prefill (its writes unfenced as far as we know) may
  // still write, so the pages stay held and the ABORT is repeated.
  f.h.advance(500ms, 500ms);
  out = test::sent(*f.bridge);
  CHECK(test::only<protocol::Abort>(out).room == 5);
  CHECK(f.ctx.load->quarantined_pages == kRoomPages);

  // An ABORT_ACK from somebody else frees nothing; the prefill's does.
  test::deliver(*f.bridge, "router", kRouterInc, protocol::AbortAck{5});
  f.h.run();
  CHECK(f.ctx.load->quarantined_pages == kRoomPages);
  f.from_prefill(protocol::AbortAck{5});
  CHECK(f.ctx.load->quarantined_pages == 0);
  CHECK(f.free_pages() == 16);
  // The room id may be used again.
  CHECK(test::of_type<protocol::Bootstrap>(f.submit(5)).size() == 1);
}

TEST_CASE("decode: a prefill restart fails the rooms shared with its old incarnation (peer_died)") {
  DecodeFixture f;
  f.submit(5);
  caf::anon_send(f.role, PeerChanges{{{"prefill-0", kPrefillInc, kPrefillInc + 1, "prefill"}}});
  f.h.run();
  auto out = test::sent(*f.bridge);
  const auto r = test::only<protocol::RoomResult>(out);
  CHECK(r.room == 5);
  CHECK(r.code == ErrorCode::peer_died);
  CHECK_THAT(r.reason, Catch::Contains("prefill-0") && Catch::Contains("restarted"));
  CHECK(f.ctx.load->active_rooms == 0);
  // The new incarnation proves the old one writes nothing any more: nothing needs to stay quarantined.
  CHECK(f.ctx.load->quarantined_pages == 0);
  CHECK(f.free_pages() == 16);

  // A room placed on another peer's incarnation is untouched by a change of a peer it does not share.
  f.h.run();
  test::sent(*f.bridge);
  (void)f.bridge->peers().replace(
      2, {test::peer("router", "router", kRouterInc), test::peer("prefill-0", "prefill", kPrefillInc + 1),
          test::peer("decode-0", "decode", kDecodeInc)});
  f.submit(7);
  caf::anon_send(f.role, PeerChanges{{{"encoder-0", 3, 4, "encoder"}}});
  f.h.run();
  CHECK(test::of_type<protocol::RoomResult>(test::sent(*f.bridge)).empty());
  CHECK(f.ctx.load->active_rooms == 1);
}

TEST_CASE("decode: a restarted prefill proves its old incarnation writes nothing, quarantined pages return") {
  DecodeFixture f;
  f.submit(5);
  f.h.advance(1000ms, 1000ms);  // waiting_timeout: quarantined
  REQUIRE(f.ctx.load->quarantined_pages == kRoomPages);
  caf::anon_send(f.role, PeerChanges{{{"prefill-0", kPrefillInc, kPrefillInc + 1, "prefill"}}});
  f.h.run();
  CHECK(f.ctx.load->quarantined_pages == 0);
  CHECK(f.free_pages() == 16);
}

TEST_CASE("decode: CANCEL from the router frees the room without a RESULT") {
  DecodeFixture f;
  f.submit(5);
  test::deliver(*f.bridge, "router", kRouterInc, protocol::Cancel{5, "client went away"});
  f.h.run();
  auto out = test::sent(*f.bridge);
  CHECK(test::of_type<protocol::RoomResult>(out).empty());
  CHECK(test::only<protocol::Abort>(out).code == ErrorCode::aborted);  // prefill may still write: told
  CHECK(f.ctx.load->active_rooms == 0);
  f.from_prefill(protocol::AbortAck{5});
  CHECK(f.free_pages() == 16);
  CHECK(f.ctx.load->cancelled_rooms == 1);
  // A repeated CANCEL, or one for a room decode does not hold, counts nothing.
  test::deliver(*f.bridge, "router", kRouterInc, protocol::Cancel{5, "again"});
  test::deliver(*f.bridge, "router", kRouterInc, protocol::Cancel{77, "unknown"});
  f.h.run();
  CHECK(f.ctx.load->cancelled_rooms == 1);
}

TEST_CASE("decode: a message type the role does not handle is answered by the bridge, never delivered") {
  DecodeFixture f;
  const auto delivered = f.bridge->stats().delivered;
  protocol::Bootstrap b;  // decode sends BOOTSTRAP, it never takes one
  b.room = 9;
  test::deliver(*f.bridge, "prefill-0", kPrefillInc, b);
  f.h.run();
  auto out = test::sent(*f.bridge);
  REQUIRE(out.size() == 1);
  CHECK(out[0].to == "offline://prefill-0");  // a registered peer is answered through its endpoint
  const auto* err = out[0].as<protocol::ErrorReply>();
  REQUIRE(err);
  CHECK(err->code == ErrorCode::unexpected_message);
  CHECK(err->in_reply_to == uint16_t(MessageType::bootstrap));
  CHECK(f.bridge->stats().delivered == delivered);
  CHECK(f.bridge->stats().undeliverable == 1);
  // An ERROR nobody takes is only logged: no ERROR ping-pong.
  test::deliver(*f.bridge, "prefill-0", kPrefillInc,
                protocol::ErrorReply{ErrorCode::unknown_room, "x", uint16_t(MessageType::bootstrap), 9});
  f.h.run();
  CHECK(test::sent(*f.bridge).empty());
  // A frame whose sender differs from its routing id is rejected with an ERROR to the routing id.
  protocol::Envelope spoof{"router", kRouterInc, protocol::Cancel{5, "x"}};
  f.bridge->receive_frame("intruder", true, protocol::encode(spoof));
  f.h.run();
  auto rej = test::sent(*f.bridge);
  REQUIRE(rej.size() == 1);
  CHECK(rej[0].reply);
  CHECK(rej[0].to == "intruder");
  CHECK(rej[0].as<protocol::ErrorReply>()->code == ErrorCode::invalid_request);
}

}  // namespace

// The encoder role under CAF's test coordinator, its compute actor and transfer worker scheduled
// (role_cluster.hpp). Router and prefill are played by the test; the prefill is a bare shm engine with a
// fenced landing region, so the embedding write really lands and is compared with the model's own encode().
#include <catch2/catch.hpp>
#include <cstring>

#include "epd/actors/aux_record.hpp"
#include "epd/model/image.hpp"
#include "epd/model/runner.hpp"
#include "role_cluster.hpp"

using namespace epd;
using namespace epd::actors;
using namespace std::chrono_literals;
using protocol::ErrorCode;

namespace {

using test::kRouterInc, test::kPrefillInc, test::kEncoderInc;

const char* kEncoderCluster = R"(
[cluster]
registry = "router"
[model]
preset = "tiny"
[transport]
backend = "shm"
[defaults.encoder]
embed_slots = 2
waiting_timeout_ms = 1000
[[instance]]
id = "router"
role = "router"
control = "tcp://127.0.0.1:17990"
[[instance]]
id = "encoder-0"
role = "encoder"
control = "tcp://127.0.0.1:17993"
[[instance]]
id = "prefill-0"
role = "prefill"
control = "tcp://127.0.0.1:17991"
)";

struct EncoderFixture {
  test::RoleCluster c{kEncoderCluster};
  test::Node& encoder = c.add("encoder-0", kEncoderInc);
  test::Node& prefill = c.add("prefill-0", kPrefillInc, false);
  uint64_t landing = 0;  // the prefill's landing slots (as its role allocates them)
  uint64_t slot_bytes = 0;
  model::Image image = model::make_test_image(32, 24, 7);  // 4 x 3 patches of 8 pixels

  EncoderFixture() {
    const auto& m = c.model();
    slot_bytes = uint64_t(m.max_image_patches) * m.d_model * sizeof(float);
    auto r = prefill.engine->allocate(kEmbedRegion, slot_bytes * 2, slot_bytes);
    REQUIRE(r.ok());
    landing = reinterpret_cast<uint64_t>(r->base);
    c.publish(kRouterInc);
    REQUIRE(encoder.ctx.load->free_slots == 2);
  }

  // SUBMIT from the router; returns what the encoder sent.
  std::vector<test::Sent> submit(uint64_t room, std::vector<uint8_t> ppm) {
    protocol::Submit s;
    s.room = room;
    s.images = {std::move(ppm)};
    s.prefill = "prefill-0";
    c.send("router", kRouterInc, "encoder-0", std::move(s));
    return c.pump();
  }
  std::vector<test::Sent> submit(uint64_t room) { return submit(room, model::encode_ppm(image)); }

  // EMBED_PULL from the prefill naming landing slot `slot` under a real write grant.
  std::vector<test::Sent> pull(uint64_t room, uint64_t bytes, uint64_t slot = 0) {
    const uint64_t unit = slot;
    const uint64_t fence = prefill.engine->grant_writes(landing, {&unit, 1});
    c.send("prefill-0", kPrefillInc, "encoder-0",
           protocol::EmbedPull{room, landing + slot * slot_bytes, bytes, ErrorCode::ok, "", fence});
    return c.pump();
  }

  std::vector<float> expected_embeddings() {
    auto runner = model::make_reference_runner(c.model());
    REQUIRE(runner.ok());
    auto emb = (*runner)->encode(image);
    REQUIRE(emb.ok());
    return emb->data;
  }
  uint32_t free_slots() const { return encoder.ctx.load->free_slots.load(); }
};

TEST_CASE("encoder: an image is encoded, announced, written into the landing slot, then EMBED_DONE ok") {
  EncoderFixture f;
  const auto expected = f.expected_embeddings();
  const uint32_t tokens = uint32_t(expected.size() / f.c.model().d_model);
  REQUIRE(tokens == 12);

  auto out = f.submit(5);
  std::string to;
  const auto meta = test::only<protocol::EmbedMeta>(out, &to);
  CHECK(to == "offline://prefill-0");
  CHECK(meta.room == 5);
  CHECK(meta.tokens == tokens);
  CHECK(meta.dim == f.c.model().d_model);
  CHECK(meta.bytes == expected.size() * sizeof(float));
  CHECK(out.size() == 1);
  CHECK(f.free_slots() == 1);

  // Slot 1 of the landing region: the write goes exactly where EMBED_PULL said.
  out = f.pull(5, meta.bytes, 1);
  const auto done = test::only<protocol::EmbedDone>(out, &to);
  CHECK(to == "offline://prefill-0");
  CHECK(done.ok);
  CHECK(done.code == ErrorCode::ok);
  CHECK(test::of_type<protocol::RoomResult>(out).empty());  // decode reports success to the router
  const auto* landed = reinterpret_cast<const float*>(f.landing + f.slot_bytes);
  CHECK(std::memcmp(landed, expected.data(), meta.bytes) == 0);
  const auto* slot0 = reinterpret_cast<const float*>(f.landing);
  CHECK(std::all_of(slot0, slot0 + expected.size(), [](float x) { return x == 0.0f; }));
  CHECK(f.free_slots() == 2);
  CHECK(f.encoder.ctx.load->active_rooms == 0);
  CHECK(f.encoder.ctx.load->writes_in_flight == 0);

  // The room is over: a repeated EMBED_PULL writes nothing and gets no answer.
  std::memset(reinterpret_cast<void*>(f.landing + f.slot_bytes), 0, meta.bytes);
  CHECK(f.pull(5, meta.bytes, 1).empty());
  CHECK(landed[0] == 0.0f);
}

TEST_CASE("encoder: an image that does not decode or has too many patches fails the room, slot freed") {
  EncoderFixture f;
  std::vector<uint8_t> ppm;
  SECTION("not a PPM") {
    ppm = {'P', '6', '\n', 'x'};
  }
  SECTION("more patches than max_image_patches") {
    ppm = model::encode_ppm(model::make_test_image(128, 128, 1));  // 256 > 64
  }
  auto out = f.submit(5, ppm);
  std::string to;
  const auto r = test::only<protocol::RoomResult>(out, &to);
  CHECK(to == "offline://router");
  CHECK(r.room == 5);
  CHECK_FALSE(r.ok);
  CHECK(r.code == ErrorCode::invalid_request);
  const auto done = test::only<protocol::EmbedDone>(out, &to);
  CHECK(to == "offline://prefill-0");
  CHECK_FALSE(done.ok);
  CHECK(done.code == ErrorCode::invalid_request);
  CHECK(test::of_type<protocol::EmbedMeta>(out).empty());
  CHECK(f.free_slots() == 2);
  CHECK(f.encoder.ctx.load->active_rooms == 0);
}

TEST_CASE(
    "encoder: nobody pulls -> waiting_timeout to the router, EMBED_DONE failed to prefill, slot freed") {
  EncoderFixture f;
  f.submit(5);
  REQUIRE(f.free_slots() == 1);
  f.c.h.advance(999ms, 999ms);
  CHECK(f.c.pump().empty());
  f.c.h.advance(1ms);
  auto out = f.c.pump();
  const auto r = test::only<protocol::RoomResult>(out);
  CHECK(r.code == ErrorCode::waiting_timeout);
  CHECK_THAT(r.reason, Catch::Contains("prefill-0"));
  const auto done = test::only<protocol::EmbedDone>(out);
  CHECK_FALSE(done.ok);
  CHECK(done.code == ErrorCode::waiting_timeout);
  CHECK(f.free_slots() == 2);
  // A late EMBED_PULL finds no room: no write, no answer.
  CHECK(f.pull(5, 12 * 64 * 4).empty());
}

TEST_CASE("encoder: an error EMBED_PULL from another prefill incarnation is answered when no write runs") {
  EncoderFixture f;
  f.submit(5);
  const protocol::EmbedPull ask{5, 0, 0, ErrorCode::aborted, "room ended at prefill", 0};
  f.c.send("prefill-0", kPrefillInc + 1, "encoder-0", ask);
  auto out = f.c.pump();
  const auto done = test::only<protocol::EmbedDone>(out);
  CHECK(done.room == 5);
  CHECK_FALSE(done.ok);
  CHECK_THAT(done.reason, Catch::Contains("no write") && Catch::Contains("in flight"));
  // The room stays the old incarnation's: it still completes when that one pulls.
  CHECK(f.free_slots() == 1);
  out = f.pull(5, 12 * 64 * 4);
  CHECK(test::only<protocol::EmbedDone>(out).ok);
  CHECK(f.free_slots() == 2);

  // A room the encoder does not hold at all: answered too.
  f.c.send("prefill-0", kPrefillInc, "encoder-0", protocol::EmbedPull{77, 0, 0, ErrorCode::aborted, "", 0});
  out = f.c.pump();
  CHECK(test::only<protocol::EmbedDone>(out).room == 77);
}

TEST_CASE("encoder: an error EMBED_PULL while the room's write runs waits for the write, which answers") {
  EncoderFixture f;
  f.submit(5);
  // The good pull and the new incarnation's question reach the encoder together: the write is queued at the
  // worker when the question is handled, so it gets no answer of its own; the write's EMBED_DONE follows.
  const uint64_t unit = 0;
  const uint64_t fence = f.prefill.engine->grant_writes(f.landing, {&unit, 1});
  f.c.send("prefill-0", kPrefillInc, "encoder-0",
           protocol::EmbedPull{5, f.landing, 12 * 64 * 4, ErrorCode::ok, "", fence});
  f.c.send("prefill-0", kPrefillInc + 1, "encoder-0",
           protocol::EmbedPull{5, 0, 0, ErrorCode::aborted, "room ended at prefill", 0});
  auto& sched = f.c.h.sched();
  // The role handles both before its worker runs.
  REQUIRE(sched.prioritize(f.encoder.main));
  sched.run_once();
  REQUIRE(f.encoder.ctx.load->writes_in_flight == 1);
  REQUIRE(sched.prioritize(f.encoder.main));
  sched.run_once();
  CHECK(test::sent(*f.encoder.bridge).empty());
  auto out = f.c.pump();
  const auto done = test::only<protocol::EmbedDone>(out);
  CHECK(done.ok);
  CHECK(f.free_slots() == 2);
}

TEST_CASE("encoder: CANCEL ends a live room without a report, frees its slot, counts it once") {
  EncoderFixture f;
  f.submit(5);  // encoded, waiting for prefill's EMBED_PULL
  REQUIRE(f.free_slots() == 1);
  f.c.send("router", kRouterInc, "encoder-0", protocol::Cancel{5, "client went away"});
  CHECK(f.c.pump().empty());  // the router ended it; prefill is cancelled by the router too
  CHECK(f.free_slots() == 2);
  CHECK(f.encoder.ctx.load->active_rooms == 0);
  CHECK(f.encoder.ctx.load->cancelled_rooms == 1);
  f.c.send("router", kRouterInc, "encoder-0", protocol::Cancel{5, "again"});
  CHECK(f.c.pump().empty());
  CHECK(f.encoder.ctx.load->cancelled_rooms == 1);

  // While its write runs: the write ends the room, and EMBED_DONE still tells prefill it is over.
  f.submit(6);
  const uint64_t unit = 0;
  const uint64_t fence = f.prefill.engine->grant_writes(f.landing, {&unit, 1});
  f.c.send("prefill-0", kPrefillInc, "encoder-0",
           protocol::EmbedPull{6, f.landing, 12 * 64 * 4, ErrorCode::ok, "", fence});
  f.c.send("router", kRouterInc, "encoder-0", protocol::Cancel{6, "client went away"});
  auto& sched = f.c.h.sched();
  REQUIRE(sched.prioritize(f.encoder.main));
  sched.run_once();
  REQUIRE(f.encoder.ctx.load->writes_in_flight == 1);
  REQUIRE(sched.prioritize(f.encoder.main));
  sched.run_once();
  CHECK(f.encoder.ctx.load->cancelled_rooms == 2);
  auto out = f.c.pump();
  CHECK(test::only<protocol::EmbedDone>(out).room == 6);
  CHECK(test::of_type<protocol::RoomResult>(out).empty());
  CHECK(f.free_slots() == 2);
  CHECK(f.encoder.ctx.load->active_rooms == 0);
  CHECK(f.encoder.ctx.load->cancelled_rooms == 2);
}

TEST_CASE("encoder: the prefill leaving fails the room with peer_died and sends it nothing") {
  EncoderFixture f;
  f.submit(5);
  caf::anon_send(f.encoder.main, PeerChanges{{{"prefill-0", kPrefillInc, 0, "prefill"}}});
  auto out = f.c.pump();
  const auto r = test::only<protocol::RoomResult>(out);
  CHECK(r.room == 5);
  CHECK(r.code == ErrorCode::peer_died);
  CHECK_THAT(r.reason, Catch::Contains("prefill-0"));
  CHECK(test::to_node(out, "prefill-0").empty());
  CHECK(f.free_slots() == 2);
  CHECK(f.encoder.ctx.load->active_rooms == 0);
}

}  // namespace

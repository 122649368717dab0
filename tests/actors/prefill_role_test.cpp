// The prefill role under CAF's test coordinator with a real decode role next to it (role_cluster.hpp): its
// compute actor, its transfer worker and decode's loop run scheduled, the KV pages and the aux record land
// in decode's pool over shm, and decode streams the tokens. The router and the encoders are played by the
// test (for the image pipeline the encoder is a real role too). Tokens are compared with the colocated
// model::generate.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <string>

#include "epd/actors/aux_record.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/image.hpp"
#include "epd/model/tokens.hpp"
#include "role_cluster.hpp"

using namespace epd;
using namespace epd::actors;
using namespace std::chrono_literals;
using protocol::ErrorCode;

namespace {

using test::kRouterInc, test::kPrefillInc, test::kDecodeInc, test::kEncoderInc;
constexpr uint64_t kOtherEncoderInc = 55;
constexpr uint32_t kMaxTokens = 6;

const char* kPrefillCluster = R"(
[cluster]
registry = "router"
[model]
preset = "tiny"
[transport]
backend = "shm"
[defaults.prefill]
kv_pages = 16
chunk_tokens = 8
transfer_workers = 1
bootstrap_timeout_ms = 1000
[defaults.decode]
kv_pages = 16
aux_slots = 4
waiting_timeout_ms = 60000
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
[[instance]]
id = "encoder-0"
role = "encoder"
control = "tcp://127.0.0.1:17993"
[[instance]]
id = "encoder-1"
role = "encoder"
control = "tcp://127.0.0.1:17994"
)";

struct PrefillFixture {
  test::RoleCluster c{kPrefillCluster};
  // What the router's SUBMITs (and the colocated reference) carry.
  uint32_t max_tokens = kMaxTokens;
  model::SamplingParams sampling;
  std::vector<uint32_t> image_grids;  // SUBMIT's (an M-RoPE model's)
  std::string request_id;
  test::Node& prefill = c.add("prefill-0", kPrefillInc);
  test::Node& decode = c.add("decode-0", kDecodeInc);
  test::Node& encoder;
  test::Node& other_encoder = c.add("encoder-1", kOtherEncoderInc, false);

  // `real_encoder`: encoder-0 runs the encoder role; else the test plays it. `toml`: another cluster config
  // with the same instances (e.g. with fault injection).
  explicit PrefillFixture(bool real_encoder = false, const char* toml = kPrefillCluster)
      : c(toml), encoder(c.add("encoder-0", kEncoderInc, real_encoder)) {
    c.publish(kRouterInc);
    REQUIRE(prefill_free_pages() == 16);
  }

  std::vector<uint32_t> prompt(std::string_view text, std::optional<model::MediaDims> image = {}) {
    auto p = model::build_prompt(c.model(), text, image);
    REQUIRE(p.ok());
    return *p;
  }
  // The router's SUBMIT to prefill (nothing runs yet).
  void submit_prefill(uint64_t room, const std::vector<uint32_t>& prompt, std::string encoder = "") {
    protocol::Submit s;
    s.room = room;
    s.prompt = prompt;
    s.image_tokens = model::count_image_tokens(prompt);
    s.max_tokens = max_tokens;
    s.request_id = request_id;
    set_sampling(s, sampling);
    s.image_grids = image_grids;
    s.encoder = std::move(encoder);
    s.prefill = "prefill-0";
    s.decode = "decode-0";
    c.send("router", kRouterInc, "prefill-0", std::move(s));
  }
  // The router's SUBMIT to decode, which answers with BOOTSTRAP to prefill.
  void submit_decode(uint64_t room, const std::vector<uint32_t>& prompt) {
    protocol::Submit s;
    s.room = room;
    s.prompt = prompt;
    s.max_tokens = max_tokens;
    s.request_id = request_id;
    set_sampling(s, sampling);
    s.image_grids = image_grids;
    s.prefill = "prefill-0";
    s.decode = "decode-0";
    c.send("router", kRouterInc, "decode-0", std::move(s));
  }
  std::vector<uint32_t> colocated(std::string_view text, const model::Image* image = nullptr) {
    auto runner = model::make_reference_runner(c.model());
    REQUIRE(runner.ok());
    model::GenerateOptions o;
    o.max_tokens = max_tokens;
    o.chunk = 8;
    o.sampling = sampling;
    auto r = model::generate(**runner, text, image, o);
    REQUIRE(r.ok());
    return r->tokens;
  }

  // The router's SUBMIT of an image prompt to the encoder.
  void submit_encoder(uint64_t room, const model::Image& image) {
    protocol::Submit s;
    s.room = room;
    s.images = {model::encode_ppm(image)};
    s.prefill = "prefill-0";
    s.request_id = request_id;
    c.send("router", kRouterInc, "encoder-0", std::move(s));
  }
  // The router's CANCEL of `room` to prefill and decode (and the encoder when it runs the role).
  void cancel(uint64_t room) {
    for (const char* id : {"prefill-0", "decode-0", "encoder-0"})
      if (c.find(id)->main) c.send("router", kRouterInc, id, protocol::Cancel{room, "client went away"});
  }

  uint32_t prefill_free_pages() const { return prefill.ctx.load->free_kv_pages.load(); }
  // Prompt positions whose K/V prefill computed into its local pool (layer 0, K): the pool starts zeroed.
  uint32_t prefill_positions_computed() const {
    const auto& l = *prefill.kv_layout;
    const auto* base = find_local_region(*prefill.engine, kKvRegion)->base;
    const uint64_t token_bytes = uint64_t(l.kv_heads) * l.head_dim * sizeof(float);
    uint32_t n = 0;
    for (uint32_t page = 0; page < l.num_pages; ++page)
      for (uint32_t slot = 0; slot < l.page_size; ++slot) {
        const uint8_t* k = base + l.page_offset(0, 0, page) + slot * token_bytes;
        n += std::any_of(k, k + token_bytes, [](uint8_t b) { return b != 0; }) ? 1 : 0;
      }
    return n;
  }
  // Nothing of any room is held by decode.
  void check_decode_idle() const {
    CHECK(decode.ctx.load->active_rooms == 0);
    CHECK(decode.ctx.load->free_kv_pages == 16);
    CHECK(decode.ctx.load->quarantined_pages == 0);
  }
  // Nothing of any room is held by prefill.
  void check_prefill_idle() const {
    CHECK(prefill.ctx.load->active_rooms == 0);
    CHECK(prefill.ctx.load->free_kv_pages == 16);
    CHECK(prefill.ctx.load->free_slots == prefill.ctx.load->total_slots);
    CHECK(prefill.ctx.load->writes_in_flight == 0);
  }
};

protocol::RoomResult only_result(const std::vector<test::Sent>& out) {
  return test::only<protocol::RoomResult>(out);
}

TEST_CASE("prefill: SUBMIT and BOOTSTRAP in either order run the room, decode streams the colocated tokens") {
  PrefillFixture f;
  const auto prompt = f.prompt("the quick brown fox");  // 20 tokens: 3 chunks, 2 pages
  std::vector<test::Sent> out;
  SECTION("SUBMIT first") {
    f.submit_prefill(5, prompt);
    CHECK(f.c.pump().empty());
    CHECK(f.prefill.ctx.load->active_rooms == 1);
    f.submit_decode(5, prompt);
    out = f.c.pump();
  }
  SECTION("BOOTSTRAP first") {
    f.submit_decode(5, prompt);
    CHECK(f.c.pump().empty());  // BOOTSTRAP went to prefill, which waits for SUBMIT
    CHECK(f.prefill.ctx.load->active_rooms == 1);
    f.submit_prefill(5, prompt);
    out = f.c.pump();
  }
  std::string to;
  const auto r = only_result(out);
  CHECK(r.room == 5);
  CHECK(r.ok);
  CHECK(r.tokens == f.colocated("the quick brown fox"));
  CHECK(r.tokens.size() == kMaxTokens);
  CHECK(test::of_type<protocol::Tokens>(out).size() == r.tokens.size());
  f.check_prefill_idle();
  CHECK(f.decode.ctx.load->free_kv_pages == 16);
  CHECK(f.decode.ctx.load->active_rooms == 0);
}

TEST_CASE(
    "pipeline: encoder, prefill and decode in one process give the colocated tokens of an image prompt") {
  PrefillFixture f(true);
  const auto image = model::make_test_image(32, 24, 7);
  const auto prompt = f.prompt("what is this", model::MediaDims{32, 24});
  REQUIRE(model::count_image_tokens(prompt) == 12);
  protocol::Submit enc;
  enc.room = 9;
  enc.images = {model::encode_ppm(image)};
  enc.prefill = "prefill-0";
  f.c.send("router", kRouterInc, "encoder-0", enc);
  f.submit_prefill(9, prompt, "encoder-0");
  f.submit_decode(9, prompt);
  auto out = f.c.pump();
  const auto r = only_result(out);
  CHECK(r.ok);
  CHECK(r.tokens == f.colocated("what is this", &image));
  f.check_prefill_idle();
  CHECK(f.encoder.ctx.load->active_rooms == 0);
  CHECK(f.encoder.ctx.load->free_slots == f.encoder.ctx.load->total_slots);
}

TEST_CASE("prefill: BOOTSTRAP never comes -> bootstrap_timeout, nothing held, the ended room stays ended") {
  PrefillFixture f;
  const auto prompt = f.prompt("x", model::MediaDims{16, 16});  // 4 image tokens
  f.submit_prefill(5, prompt, "encoder-0");
  f.c.h.advance(999ms, 999ms);
  CHECK(f.c.pump().empty());
  f.c.h.advance(1ms);
  auto out = f.c.pump();
  std::string to;
  const auto r = test::only<protocol::RoomResult>(out, &to);
  CHECK(to == "offline://router");
  CHECK_FALSE(r.ok);
  CHECK(r.code == ErrorCode::bootstrap_timeout);
  CHECK_THAT(r.reason, Catch::Contains("BOOTSTRAP"));
  f.check_prefill_idle();

  // A late SUBMIT or BOOTSTRAP does not revive it (tombstone).
  f.submit_prefill(5, prompt, "encoder-0");
  f.submit_decode(5, prompt);
  out = f.c.pump();
  CHECK(test::from_node(out, "prefill-0").empty());
  CHECK(f.prefill.ctx.load->active_rooms == 0);

  // The encoder, still working for it, is told the room's real cause.
  f.c.send("encoder-0", kEncoderInc, "prefill-0", protocol::EmbedMeta{5, 4, 64, 4 * 64 * 4});
  out = f.c.pump();
  const auto pull = test::only<protocol::EmbedPull>(out, &to);
  CHECK(to == "offline://encoder-0");
  CHECK(pull.code == ErrorCode::bootstrap_timeout);
  CHECK(pull.bytes == 0);
  CHECK_THAT(pull.reason, Catch::Contains("room already ended"));
  f.check_prefill_idle();
}

TEST_CASE("prefill: EMBED_META from an encoder other than the one SUBMIT named is refused") {
  PrefillFixture f;
  const auto prompt = f.prompt("x", model::MediaDims{16, 16});
  f.submit_prefill(5, prompt, "encoder-0");
  f.c.pump();
  f.c.send("encoder-1", kOtherEncoderInc, "prefill-0", protocol::EmbedMeta{5, 4, 64, 4 * 64 * 4});
  auto out = f.c.pump();
  CHECK(test::to_node(out, "encoder-1").empty());  // no landing slot offered to it
  CHECK(f.prefill.ctx.load->free_slots == f.prefill.ctx.load->total_slots);
  // The named encoder is offered a slot under a write grant.
  f.c.send("encoder-0", kEncoderInc, "prefill-0", protocol::EmbedMeta{5, 4, 64, 4 * 64 * 4});
  out = f.c.pump();
  const auto pull = test::only<protocol::EmbedPull>(out);
  CHECK(pull.code == ErrorCode::ok);
  CHECK(pull.bytes == 4 * 64 * 4);
  CHECK(pull.fence != 0);
  CHECK(f.prefill.engine->find_local(pull.addr, pull.bytes) != nullptr);
  CHECK(f.prefill.ctx.load->free_slots == f.prefill.ctx.load->total_slots - 1);
}

TEST_CASE("prefill: ABORT while a page write runs is acknowledged once the write ended, no KV_STATUS") {
  PrefillFixture f;
  const auto prompt = f.prompt("the quick brown fox");
  f.submit_prefill(5, prompt);
  f.c.pump();
  f.submit_decode(5, prompt);
  f.c.h.run();
  // Decode's BOOTSTRAP reaches prefill; run until the first page write is handed to the worker.
  const protocol::Bootstrap boot = test::only<protocol::Bootstrap>(test::sent(*f.decode.bridge));
  f.c.send("decode-0", kDecodeInc, "prefill-0", boot);
  auto& sched = f.c.h.sched();
  while (f.prefill.ctx.load->writes_in_flight == 0) REQUIRE(sched.try_run_once());
  f.c.send("decode-0", kDecodeInc, "prefill-0", protocol::Abort{5, ErrorCode::waiting_timeout, "too slow"});
  // Prefill handles what it has queued (the last chunks, then the ABORT) while its worker waits.
  while (sched.prioritize(f.prefill.main)) sched.run_once();
  CHECK(test::of_type<protocol::AbortAck>(test::sent(*f.prefill.bridge)).empty());
  CHECK(f.prefill.ctx.load->writes_in_flight == 2);
  f.c.h.run();
  auto out = test::sent(*f.prefill.bridge);
  std::string to;
  CHECK(test::only<protocol::AbortAck>(out, &to).room == 5);
  CHECK(to == "offline://decode-0");
  CHECK(test::of_type<protocol::KvStatus>(out).empty());
  CHECK(test::of_type<protocol::RoomResult>(out).empty());  // decode ended it: decode tells the router
  f.check_prefill_idle();
  // An ABORT for a room prefill does not hold is acknowledged at once.
  f.c.send("decode-0", kDecodeInc, "prefill-0", protocol::Abort{77, ErrorCode::aborted, ""});
  f.c.h.run();
  const auto acks = test::sent(*f.prefill.bridge);
  CHECK(test::only<protocol::AbortAck>(acks).room == 77);
}

// A room held between BOOTSTRAP and its embeddings (nothing computes, nothing writes).
void waiting_for_embeddings(PrefillFixture& f, uint64_t room) {
  const auto prompt = f.prompt("x", model::MediaDims{16, 16});
  f.submit_prefill(room, prompt, "encoder-0");
  f.submit_decode(room, prompt);
  CHECK(f.c.pump().empty());
  REQUIRE(f.prefill.ctx.load->active_rooms == 1);
}

TEST_CASE("prefill: CANCEL from the router ends the room without a RESULT") {
  PrefillFixture f;
  waiting_for_embeddings(f, 5);
  f.c.send("router", kRouterInc, "prefill-0", protocol::Cancel{5, "client went away"});
  f.c.h.run();
  auto out = test::sent(*f.prefill.bridge);
  CHECK(test::of_type<protocol::RoomResult>(out).empty());
  const auto kv = test::only<protocol::KvStatus>(out);  // decode frees its pages
  CHECK(kv.state == protocol::KvState::failed);
  CHECK(kv.code == ErrorCode::aborted);
  f.check_prefill_idle();
  CHECK(f.prefill.ctx.load->cancelled_rooms == 1);
  // Another CANCEL, or one for a room prefill never had, counts nothing.
  f.c.send("router", kRouterInc, "prefill-0", protocol::Cancel{5, "again"});
  f.c.send("router", kRouterInc, "prefill-0", protocol::Cancel{77, "unknown"});
  f.c.h.run();
  CHECK(f.prefill.ctx.load->cancelled_rooms == 1);
}

TEST_CASE("prefill: a decode restart fails its rooms with peer_died and tells the old decode nothing") {
  PrefillFixture f;
  waiting_for_embeddings(f, 5);
  caf::anon_send(f.prefill.main, PeerChanges{{{"decode-0", kDecodeInc, kDecodeInc + 1, "decode"}}});
  f.c.h.run();
  auto out = test::sent(*f.prefill.bridge);
  const auto r = only_result(out);
  CHECK(r.room == 5);
  CHECK(r.code == ErrorCode::peer_died);
  CHECK_THAT(r.reason, Catch::Contains("decode-0"));
  CHECK(test::to_node(out, "decode-0").empty());
  f.check_prefill_idle();
}

TEST_CASE(
    "pipeline: sampled tokens equal the colocated run with the same params, for rooms batched together") {
  PrefillFixture f(true);
  f.sampling = model::SamplingParams{0.8f, 0.9f, 40, 7};
  f.max_tokens = 24;
  const auto image = model::make_test_image(32, 24, 7);
  const auto text_prompt = f.prompt("the quick brown fox");
  const auto image_prompt = f.prompt("what is this", model::MediaDims{32, 24});
  f.submit_prefill(5, text_prompt);
  f.submit_decode(5, text_prompt);
  f.submit_encoder(9, image);
  f.submit_prefill(9, image_prompt, "encoder-0");
  f.submit_decode(9, image_prompt);
  const auto out = f.c.pump();
  std::map<uint64_t, protocol::RoomResult> results;
  for (const auto* r : test::of_type<protocol::RoomResult>(out))
    results[r->as<protocol::RoomResult>()->room] = *r->as<protocol::RoomResult>();
  REQUIRE(results.size() == 2);
  CHECK(results[5].ok);
  CHECK(results[9].ok);
  const auto text_tokens = f.colocated("the quick brown fox");
  CHECK(results[5].tokens == text_tokens);
  CHECK(results[9].tokens == f.colocated("what is this", &image));
  // The params really changed the tokens.
  f.sampling = {};
  CHECK(text_tokens != f.colocated("the quick brown fox"));
  f.check_prefill_idle();
  f.check_decode_idle();
}

TEST_CASE("request id: every role names the room with the client's request id in its log lines") {
  test::LogCapture logs;
  PrefillFixture f(true);
  f.request_id = "abc-123";
  const auto image = model::make_test_image(32, 24, 7);
  const auto prompt = f.prompt("what is this", model::MediaDims{32, 24});
  f.submit_encoder(9, image);
  f.submit_prefill(9, prompt, "encoder-0");
  f.submit_decode(9, prompt);
  CHECK(only_result(f.c.pump()).ok);
  for (const char* role : {"encoder: ", "prefill: ", "decode: "}) {
    INFO(role);
    CHECK_FALSE(logs.lines_with(std::string(role) + "room 9 [req abc-123]").empty());
  }
  // A failure names it too; a hostile id is cut and escaped (one log line stays one line).
  f.request_id = "bad\nid" + std::string(500, 'x');
  f.sampling.temperature = 3;
  f.submit_decode(10, prompt);
  const auto refused = only_result(f.c.pump());
  CHECK(refused.code == ErrorCode::invalid_request);
  CHECK_THAT(refused.reason, Catch::Contains("temperature"));
  const auto lines = logs.lines_with("room 10 [req bad\\x0aid");
  REQUIRE(lines.size() == 1);
  CHECK_THAT(lines[0], Catch::Contains("decode: refused"));
  CHECK_THAT(lines[0],
             Catch::Contains(std::string(122, 'x') + "]") && !Catch::Contains(std::string(123, 'x')));
}

TEST_CASE("sampling params out of range are refused by prefill and decode, nothing held") {
  PrefillFixture f;
  f.sampling.top_p = 0;
  const auto prompt = f.prompt("hello");
  f.submit_decode(7, prompt);
  auto out = f.c.pump();
  std::string to;
  auto r = test::only<protocol::RoomResult>(out, &to);
  CHECK(to == "offline://router");
  CHECK(r.code == ErrorCode::invalid_request);
  CHECK_THAT(r.reason, Catch::Contains("top_p"));
  f.submit_prefill(8, prompt);
  r = only_result(f.c.pump());
  CHECK(r.room == 8);
  CHECK(r.code == ErrorCode::invalid_request);
  CHECK_THAT(r.reason, Catch::Contains("top_p"));
  f.check_prefill_idle();
  f.check_decode_idle();
}

TEST_CASE("image grids for a model without M-RoPE are refused by prefill and decode, nothing held") {
  // Where a row rotates is the model's to say: grids the router had no business sending mean a mismatched
  // router, whose prompt the roles must not compute.
  PrefillFixture f;
  f.image_grids = {2, 2};
  const auto prompt = f.prompt("hello");
  f.submit_decode(7, prompt);
  auto out = f.c.pump();
  auto r = test::only<protocol::RoomResult>(out);
  CHECK(r.code == ErrorCode::invalid_request);
  CHECK_THAT(r.reason, Catch::Contains("image_grids") && Catch::Contains("no M-RoPE"));
  f.submit_prefill(8, prompt);
  r = only_result(f.c.pump());
  CHECK(r.room == 8);
  CHECK(r.code == ErrorCode::invalid_request);
  CHECK_THAT(r.reason, Catch::Contains("image_grids") && Catch::Contains("no M-RoPE"));
  f.check_prefill_idle();
  f.check_decode_idle();
}

TEST_CASE("cancel mid-prefill: compute stops before the next chunks, every page returns, both count it") {
  PrefillFixture f;
  // 100 prompt tokens: 13 chunks of 8, 7 pages of 16.
  const std::string text(99, 'a');
  const auto prompt = f.prompt(text);
  REQUIRE(prompt.size() == 100);
  f.submit_prefill(5, prompt);
  f.submit_decode(5, prompt);
  // Step one message at a time until two chunks are computed. The coordinator keeps running an actor while
  // its mailbox holds messages (compute steps itself chunk by chunk), so the CANCEL is handled by
  // prioritising prefill: its PrefillDrop then waits behind compute's next step, as it would on a thread.
  auto& sched = f.c.h.sched();
  std::vector<test::Sent> out;
  while (f.prefill_positions_computed() < 16) {
    if (!sched.try_run_once()) REQUIRE(f.c.route(out));
  }
  const uint32_t computed = f.prefill_positions_computed();
  f.cancel(5);
  while (sched.prioritize(f.prefill.main)) sched.run_once();
  auto rest = f.c.pump();
  out.insert(out.end(), rest.begin(), rest.end());
  // At most the chunk already queued behind the one that completed the page was computed.
  CHECK(f.prefill_positions_computed() <= computed + 8);
  CHECK(f.prefill_positions_computed() < 100);
  CHECK(test::of_type<protocol::RoomResult>(out).empty());  // the router ended it: nobody reports
  f.check_prefill_idle();
  f.check_decode_idle();
  CHECK(f.prefill.ctx.load->cancelled_rooms == 1);
  CHECK(f.decode.ctx.load->cancelled_rooms == 1);
}

TEST_CASE("cancel mid-decode: the room leaves the batch, its pages return, decode counts it") {
  PrefillFixture f;
  f.max_tokens = 40;
  const auto prompt = f.prompt("the quick brown fox");
  f.submit_prefill(5, prompt);
  f.submit_decode(5, prompt);
  auto& sched = f.c.h.sched();
  std::vector<test::Sent> out;
  while (test::of_type<protocol::Tokens>(out).size() < 3) {
    if (!sched.try_run_once()) REQUIRE(f.c.route(out));
    f.c.route(out);
  }
  CHECK(f.decode.ctx.load->active_rooms == 1);
  f.cancel(5);
  // Decode handles it now (the loop would step on while it has steps queued): see cancel mid-prefill.
  while (sched.prioritize(f.decode.main)) sched.run_once();
  auto rest = f.c.pump();
  out.insert(out.end(), rest.begin(), rest.end());
  const size_t streamed = test::of_type<protocol::Tokens>(out).size();
  CHECK(streamed < 6);  // at most a step or two after the CANCEL, not 40
  CHECK(test::of_type<protocol::RoomResult>(out).empty());
  f.check_decode_idle();
  f.check_prefill_idle();
  CHECK(f.decode.ctx.load->cancelled_rooms == 1);
  CHECK(f.prefill.ctx.load->cancelled_rooms == 0);  // its part was over
}

}  // namespace

namespace {

// kPrefillCluster with prefill-0's transport throwing in its transfer worker from the Nth write op of a
// session on.
std::string cluster_with_worker_crash(uint64_t throw_after_ops) {
  std::string toml = kPrefillCluster;
  const std::string at = "control = \"tcp://127.0.0.1:17991\"\n";
  const auto pos = toml.find(at);
  REQUIRE(pos != std::string::npos);
  toml.insert(pos + at.size(),
              "[instance.transport]\nfault_throw_after_ops = " + std::to_string(throw_after_ops) + "\n");
  return toml;
}

}  // namespace

TEST_CASE("prefill: a short prompt behind a long one is computed in the long one's passes, not after them",
          "[prefill]") {
  // 12 chunks of at most 8 tokens, then 1. With batch_tokens 1 (one room a pass, as prefill once was) the
  // short room waits for every chunk of the long one, which then answers first; by default each pass takes
  // the long room's next chunk and the short room's, which answers first.
  const std::string long_text(90, 'x'), short_text = "hi";
  for (const bool one_room_a_pass : {false, true}) {
    DYNAMIC_SECTION((one_room_a_pass ? "batch_tokens = 1" : "batch_tokens by default")) {
      std::string toml = kPrefillCluster;
      if (one_room_a_pass) {
        const std::string at = "[defaults.prefill]\n";
        toml.insert(toml.find(at) + at.size(), "batch_tokens = 1\n");
      }
      PrefillFixture f(false, toml.c_str());
      const auto long_prompt = f.prompt(long_text), short_prompt = f.prompt(short_text);
      REQUIRE(long_prompt.size() > 11 * 8);  // 12 chunks
      REQUIRE(short_prompt.size() <= 8);
      f.submit_prefill(5, long_prompt);
      f.submit_decode(5, long_prompt);
      f.submit_prefill(6, short_prompt);
      f.submit_decode(6, short_prompt);
      const auto out = f.c.pump();
      const auto results = test::of_type<protocol::RoomResult>(out);
      REQUIRE(results.size() == 2);
      const auto& first = *results[0]->as<protocol::RoomResult>();
      const auto& second = *results[1]->as<protocol::RoomResult>();
      CHECK(first.room == (one_room_a_pass ? 5u : 6u));
      CHECK(second.room == (one_room_a_pass ? 6u : 5u));
      for (const auto* r : {&first, &second}) {
        INFO("room " << r->room << ": " << r->reason);
        CHECK(r->ok);
        CHECK(r->tokens == f.colocated(r->room == 5 ? long_text : short_text));
      }
      f.check_prefill_idle();
      f.check_decode_idle();
    }
  }
}

TEST_CASE(
    "prefill: a crashed transfer worker fails only the room it cut short, the rest go to its replacement",
    "[prefill][fault]") {
  // One worker; each room writes page 0 (4 ops: 2 layers x K/V), page 1 (4 ops), then its aux record (1 op).
  // The compute actor computes the two rooms' chunks in the same passes (room 5's, then room 6's), so the
  // role hands the worker the page writes of both before it runs them: both page 0s (ops 1-8), then with
  // the session throwing at op 10, room 5's page 1 write throws while room 6's page 1 write waits in the
  // worker's mailbox, never started. Under the test coordinator the order is the same every run. The
  // replacement's fresh session takes room 6's writes (5 ops) well before its op 10.
  const std::string toml = cluster_with_worker_crash(10);
  PrefillFixture f(false, toml.c_str());
  test::LogCapture logs;
  const auto prompt = f.prompt("the quick brown fox");  // 20 tokens: 3 chunks, 2 pages
  for (uint64_t room : {5, 6}) {
    f.submit_prefill(room, prompt);
    f.submit_decode(room, prompt);
  }
  const auto out = f.c.pump();
  std::map<uint64_t, protocol::RoomResult> results;
  for (const auto* r : test::of_type<protocol::RoomResult>(out))
    results[r->as<protocol::RoomResult>()->room] = *r->as<protocol::RoomResult>();
  REQUIRE(results.size() == 2);
  CHECK(f.prefill.ctx.load->worker_restarts == 1);  // exactly one crash
  CHECK(logs.lines_with("cut short: room(s) 5)").size() == 1);
  // The room whose write threw fails with the crash's cause, retryable ...
  CHECK_FALSE(results[5].ok);
  CHECK(results[5].code == ErrorCode::worker_crashed);
  CHECK_THAT(results[5].reason,
             Catch::Contains("transfer worker crashed") && Catch::Contains("fault backend"));
  // ... the other one was not touched by it: its write went to the replacement, and it gives its tokens.
  INFO(results[6].reason);
  CHECK(results[6].ok);
  CHECK(results[6].tokens == f.colocated("the quick brown fox"));
  CHECK(logs.lines_with("sent again to transfer worker 0").size() == 1);
  f.check_prefill_idle();
  CHECK(f.decode.ctx.load->free_kv_pages == 16);
  CHECK(f.decode.ctx.load->active_rooms == 0);
}

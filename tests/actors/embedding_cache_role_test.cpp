// The embedding cache in the encoder and prefill roles (role_cluster.hpp, CAF's test coordinator). The
// encoder is a real role where its side is tested and played by the test where prefill's is, so every
// EMBED_META / EMBED_PULL / EMBED_DONE is visible; the embeddings that land are compared byte for byte with
// the model's encode(), and prefill's tokens with the colocated model::generate.
#include <catch2/catch.hpp>
#include <cstring>
#include <sstream>

#include "epd/actors/aux_record.hpp"
#include "epd/actors/cache/content_hash.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/image.hpp"
#include "epd/model/runner.hpp"
#include "epd/model/tokens.hpp"
#include "role_cluster.hpp"

using namespace epd;
using namespace epd::actors;
using protocol::ErrorCode;

namespace {

using test::kRouterInc, test::kPrefillInc, test::kDecodeInc, test::kEncoderInc;

// The tiny model: a 32 x 24 image is 12 embeddings of 64 floats (3072 bytes). Prefill's cache holds one
// such image, not two, so the second image evicts the first.
std::string cluster_toml(const std::string& encoder_cache, const std::string& prefill_cache) {
  return R"(
[cluster]
registry = "router"
[model]
preset = "tiny"
[transport]
backend = "shm"
[defaults.encoder]
embed_slots = 2
waiting_timeout_ms = 1000
embedding_cache_bytes = )" +
         encoder_cache + R"(
[defaults.prefill]
kv_pages = 16
chunk_tokens = 8
transfer_workers = 1
bootstrap_timeout_ms = 1000
embedding_cache_bytes = )" +
         prefill_cache + R"(
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
)";
}

// A counter or gauge of a node's metrics (the first series of that name), -1 if absent.
double metric(const test::Node& n, const std::string& name) {
  std::istringstream in(n.ctx.metrics->render());
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name, 0) != 0 || line.size() <= name.size()) continue;
    if (line[name.size()] != '{' && line[name.size()] != ' ') continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

std::vector<float> encoded(const model::ModelConfig& cfg, const model::Image& image) {
  auto runner = model::make_reference_runner(cfg);
  REQUIRE(runner.ok());
  auto emb = (*runner)->encode(image);
  REQUIRE(emb.ok());
  return emb->data;
}

// The encoder's side: a real encoder role, prefill played by the test with a fenced landing region.
struct EncoderSide {
  std::string toml;
  test::RoleCluster c;
  test::Node& encoder;
  test::Node& prefill;
  uint64_t landing = 0;
  uint64_t slot_bytes = 0;

  explicit EncoderSide(const std::string& cache_bytes)
      : toml(cluster_toml(cache_bytes, "0")),
        c(toml.c_str()),
        encoder(c.add("encoder-0", kEncoderInc)),
        prefill(c.add("prefill-0", kPrefillInc, false)) {
    slot_bytes = uint64_t(c.model().max_image_patches) * c.model().d_model * sizeof(float);
    auto r = prefill.engine->allocate(kEmbedRegion, slot_bytes * 2, slot_bytes);
    REQUIRE(r.ok());
    landing = reinterpret_cast<uint64_t>(r->base);
    c.publish(kRouterInc);
  }
  protocol::EmbedMeta submit(uint64_t room, const model::Image& image) {
    protocol::Submit s;
    s.room = room;
    s.images = {model::encode_ppm(image)};
    s.prefill = "prefill-0";
    c.send("router", kRouterInc, "encoder-0", std::move(s));
    return test::only<protocol::EmbedMeta>(c.pump());
  }
  std::vector<test::Sent> pull(uint64_t room, uint64_t bytes, bool cached = false) {
    const uint64_t unit = 0;
    const uint64_t fence = cached ? 0 : prefill.engine->grant_writes(landing, {&unit, 1});
    c.send("prefill-0", kPrefillInc, "encoder-0",
           protocol::EmbedPull{room, cached ? 0 : landing, bytes, ErrorCode::ok, "", fence, cached});
    return c.pump();
  }
  const uint8_t* landed() const { return reinterpret_cast<const uint8_t*>(landing); }
};

}  // namespace

TEST_CASE("encoder cache: a repeated image is not encoded again and lands the same embeddings") {
  EncoderSide f("1048576");
  const auto image = model::make_test_image(32, 24, 7);
  const auto expected = encoded(f.c.model(), image);
  const uint64_t bytes = expected.size() * sizeof(float);

  const auto first = f.submit(5, image);
  const auto hash = content_hash(image);
  REQUIRE(hash);
  CHECK(first.content_hash == std::vector<uint8_t>(hash->begin(), hash->end()));
  CHECK(metric(f.encoder, "epd_embedding_cache_misses_total") == 1);
  CHECK(metric(f.encoder, "epd_embedding_cache_hits_total") == 0);
  CHECK(metric(f.encoder, "epd_embedding_cache_bytes") == double(bytes));
  CHECK(test::only<protocol::EmbedDone>(f.pull(5, bytes)).ok);
  REQUIRE(std::memcmp(f.landed(), expected.data(), bytes) == 0);

  // The same pixels in another PPM spelling: a hit, and the write lands the same bytes.
  std::memset(reinterpret_cast<void*>(f.landing), 0, bytes);
  const std::string header = "P6 # same pixels, another file\n32 24\n255\n";
  protocol::Submit s;
  s.room = 6;
  const std::string file = header + std::string(image.rgb.begin(), image.rgb.end());
  s.images = {std::vector<uint8_t>(file.begin(), file.end())};
  s.prefill = "prefill-0";
  f.c.send("router", kRouterInc, "encoder-0", std::move(s));
  const auto second = test::only<protocol::EmbedMeta>(f.c.pump());
  CHECK(second.content_hash == first.content_hash);
  CHECK(second.tokens == first.tokens);
  CHECK(second.bytes == bytes);
  CHECK(metric(f.encoder, "epd_embedding_cache_hits_total") == 1);
  CHECK(metric(f.encoder, "epd_embedding_cache_bytes_saved_total") == double(bytes));
  CHECK(test::only<protocol::EmbedDone>(f.pull(6, bytes)).ok);
  CHECK(std::memcmp(f.landed(), expected.data(), bytes) == 0);

  // Another image: a miss with another hash.
  const auto third = f.submit(7, model::make_test_image(32, 24, 8));
  CHECK(third.content_hash != first.content_hash);
  CHECK(metric(f.encoder, "epd_embedding_cache_misses_total") == 2);
  CHECK(f.encoder.ctx.load->free_slots == 1);
}

TEST_CASE("encoder cache: a cached EMBED_PULL ends the room with no write and frees its slot") {
  EncoderSide f("1048576");
  const auto image = model::make_test_image(32, 24, 7);
  const auto meta = f.submit(5, image);
  REQUIRE(f.encoder.ctx.load->free_slots == 1);
  auto out = f.pull(5, meta.bytes, true);
  CHECK(out.empty());  // no EMBED_DONE, no RESULT: prefill has what it needs
  CHECK(std::all_of(f.landed(), f.landed() + meta.bytes, [](uint8_t b) { return b == 0; }));
  CHECK(f.encoder.ctx.load->free_slots == 2);
  CHECK(f.encoder.ctx.load->active_rooms == 0);
  CHECK(metric(f.encoder, "epd_embedding_transfers_skipped_total") == 1);
  // The room is over: a normal pull for it now writes nothing.
  CHECK(f.pull(5, meta.bytes).empty());
  CHECK(std::all_of(f.landed(), f.landed() + meta.bytes, [](uint8_t b) { return b == 0; }));
}

TEST_CASE("encoder cache: embedding_cache_bytes = 0 encodes every image and sends no hash") {
  EncoderSide f("0");
  const auto image = model::make_test_image(32, 24, 7);
  const auto expected = encoded(f.c.model(), image);
  for (uint64_t room : {5, 6}) {
    const auto meta = f.submit(room, image);
    CHECK(meta.content_hash.empty());
    CHECK(test::only<protocol::EmbedDone>(f.pull(room, meta.bytes)).ok);
    CHECK(std::memcmp(f.landed(), expected.data(), meta.bytes) == 0);
  }
  CHECK(metric(f.encoder, "epd_embedding_cache_hits_total") == 0);
  CHECK(metric(f.encoder, "epd_embedding_cache_misses_total") == 0);
  CHECK(metric(f.encoder, "epd_embedding_cache_capacity_bytes") == 0);
  // A prefill claiming to hold an image that was sent without a hash is not believed: the room fails.
  const auto meta = f.submit(7, image);
  auto out = f.pull(7, meta.bytes, true);
  const auto result = test::only<protocol::RoomResult>(out);
  CHECK_FALSE(result.ok);
  CHECK(result.code == ErrorCode::unexpected_message);
  CHECK(f.encoder.ctx.load->free_slots == 2);
}

namespace {

// Prefill's side: real prefill and decode roles; the encoder is played by the test, writing the model's
// embeddings into the landing slot EMBED_PULL names (same process, so a memcpy) and answering EMBED_DONE.
struct PrefillSide {
  std::string toml;
  test::RoleCluster c;
  test::Node& prefill;
  test::Node& decode;
  test::Node& encoder;

  explicit PrefillSide(const std::string& cache_bytes)
      : toml(cluster_toml("0", cache_bytes)),
        c(toml.c_str()),
        prefill(c.add("prefill-0", kPrefillInc)),
        decode(c.add("decode-0", kDecodeInc)),
        encoder(c.add("encoder-0", kEncoderInc, false)) {
    c.publish(kRouterInc);
  }
  std::vector<uint32_t> prompt() {
    auto p = model::build_prompt(c.model(), "what is this", model::MediaDims{32, 24});
    REQUIRE(p.ok());
    return *p;
  }
  void submit(uint64_t room) {
    const auto p = prompt();
    protocol::Submit s;
    s.room = room;
    s.prompt = p;
    s.image_tokens = model::count_image_tokens(p);
    s.max_tokens = 6;
    s.encoder = "encoder-0";
    s.prefill = "prefill-0";
    s.decode = "decode-0";
    c.send("router", kRouterInc, "prefill-0", s);
    c.send("router", kRouterInc, "decode-0", s);
    c.pump();
  }
  // EMBED_META for `image`, with its content hash unless `hashed` is false; returns prefill's EMBED_PULL.
  protocol::EmbedPull meta(uint64_t room, const model::Image& image, bool hashed = true) {
    return test::only<protocol::EmbedPull>(meta_frames(room, image, hashed));
  }
  // The same, returning every frame that came of it.
  std::vector<test::Sent> meta_frames(uint64_t room, const model::Image& image, bool hashed = true) {
    const auto emb = encoded(c.model(), image);
    protocol::EmbedMeta m{room, 12, c.model().d_model, emb.size() * sizeof(float), protocol::DType::f32, {}};
    if (hashed) {
      const auto h = content_hash(image);
      m.content_hash.assign(h->begin(), h->end());
    }
    c.send("encoder-0", kEncoderInc, "prefill-0", m);
    return c.pump();
  }
  // The encoder's write and EMBED_DONE; returns the room's RESULT.
  protocol::RoomResult write(const protocol::EmbedPull& pull, const model::Image& image) {
    const auto emb = encoded(c.model(), image);
    REQUIRE(pull.bytes == emb.size() * sizeof(float));
    std::memcpy(reinterpret_cast<void*>(pull.addr), emb.data(), pull.bytes);
    c.send("encoder-0", kEncoderInc, "prefill-0", protocol::EmbedDone{pull.room, true, ErrorCode::ok, "", 1});
    return test::only<protocol::RoomResult>(c.pump());
  }
  std::vector<uint32_t> colocated(const model::Image& image) {
    auto runner = model::make_reference_runner(c.model());
    REQUIRE(runner.ok());
    model::GenerateOptions o;
    o.max_tokens = 6;
    o.chunk = 8;
    auto r = model::generate(**runner, "what is this", &image, o);
    REQUIRE(r.ok());
    return r->tokens;
  }
  void check_idle() const {
    CHECK(prefill.ctx.load->active_rooms == 0);
    CHECK(prefill.ctx.load->free_slots == prefill.ctx.load->total_slots);
    CHECK(prefill.ctx.load->free_kv_pages == 16);
    CHECK(decode.ctx.load->active_rooms == 0);
  }
};

}  // namespace

TEST_CASE("prefill cache: embeddings it still holds are not transferred again and the tokens are the same") {
  PrefillSide f("4096");
  const auto image = model::make_test_image(32, 24, 7);
  const auto tokens = f.colocated(image);

  f.submit(5);
  const auto pull = f.meta(5, image);
  CHECK_FALSE(pull.cached);
  CHECK(pull.addr != 0);
  const auto first = f.write(pull, image);
  CHECK(first.ok);
  CHECK(first.tokens == tokens);
  CHECK(metric(f.prefill, "epd_embedding_cache_misses_total") == 1);
  CHECK(metric(f.prefill, "epd_embedding_cache_entries") == 1);
  f.check_idle();

  // Same hash: prefill copies its own copy, tells the encoder no write is wanted, and runs the room at once:
  // no EMBED_DONE comes or is needed.
  f.submit(6);
  const auto out = f.meta_frames(6, image);
  const auto m = test::only<protocol::EmbedPull>(out);
  CHECK(m.cached);
  CHECK(m.code == ErrorCode::ok);
  CHECK(m.addr == 0);
  CHECK(m.fence == 0);
  const auto second = test::only<protocol::RoomResult>(out);
  CHECK(second.room == 6);
  CHECK(second.ok);
  CHECK(second.tokens == tokens);
  CHECK(metric(f.prefill, "epd_embedding_cache_hits_total") == 1);
  CHECK(metric(f.prefill, "epd_embedding_transfers_skipped_total") == 1);
  CHECK(metric(f.prefill, "epd_embedding_cache_bytes_saved_total") == double(m.bytes));
  f.check_idle();
}

TEST_CASE("prefill cache: an evicted or unhashed image is a normal transfer with the right embeddings") {
  PrefillSide f("4096");  // one image
  const auto a = model::make_test_image(32, 24, 7);
  const auto b = model::make_test_image(32, 24, 8);
  REQUIRE(f.colocated(a) != f.colocated(b));

  f.submit(5);
  CHECK(f.write(f.meta(5, a), a).tokens == f.colocated(a));
  f.submit(6);
  CHECK(f.write(f.meta(6, b), b).tokens == f.colocated(b));  // evicts a
  CHECK(metric(f.prefill, "epd_embedding_cache_evictions_total") == 1);

  // a was evicted: a miss, pulled and written again, and the tokens are a's.
  f.submit(7);
  const auto pull = f.meta(7, a);
  CHECK_FALSE(pull.cached);
  CHECK(f.write(pull, a).tokens == f.colocated(a));
  // An EMBED_META without a hash (an older encoder, or its cache off) is never answered from the cache.
  f.submit(8);
  const auto unhashed = f.meta(8, a, false);
  CHECK_FALSE(unhashed.cached);
  CHECK(f.write(unhashed, a).tokens == f.colocated(a));
  CHECK(metric(f.prefill, "epd_embedding_cache_hits_total") == 0);
  CHECK(metric(f.prefill, "epd_embedding_cache_misses_total") == 3);
  f.check_idle();
}

TEST_CASE("prefill cache: off with embedding_cache_bytes = 0") {
  PrefillSide f("0");
  const auto a = model::make_test_image(32, 24, 7);
  for (uint64_t room : {5, 6}) {
    f.submit(room);
    const auto pull = f.meta(room, a);
    CHECK_FALSE(pull.cached);
    CHECK(f.write(pull, a).tokens == f.colocated(a));
  }
  CHECK(metric(f.prefill, "epd_embedding_cache_hits_total") == 0);
  CHECK(metric(f.prefill, "epd_embedding_cache_entries") == 0);
  f.check_idle();
}

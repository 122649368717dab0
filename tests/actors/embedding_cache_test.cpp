// The embedding cache (LRU by bytes, pins) and its key, the content hash of decoded pixels.
#include <catch2/catch.hpp>
#include <cstring>
#include <string>

#include "epd/actors/cache/content_hash.hpp"
#include "epd/actors/cache/embedding_cache.hpp"
#include "epd/model/image.hpp"
#include "epd/model/image_codec.hpp"

using namespace epd;
using namespace epd::actors;

namespace {

ContentHash key(uint8_t n) {
  ContentHash h{};
  h[0] = n;
  h[31] = uint8_t(~n);
  return h;
}

std::vector<uint8_t> bytes_of(size_t size, uint8_t fill) {
  return std::vector<uint8_t>(size, fill);
}

bool holds(const EmbeddingCache& c, std::initializer_list<uint8_t> keys) {
  for (uint8_t k : keys)
    if (!c.contains(key(k))) return false;
  return true;
}

}  // namespace

TEST_CASE("embedding cache: the least recently used entries go first and the bytes stay bounded") {
  EmbeddingCache c(300);
  REQUIRE(c.insert(key(1), bytes_of(100, 1), 1));
  REQUIRE(c.insert(key(2), bytes_of(100, 2), 2));
  REQUIRE(c.insert(key(3), bytes_of(100, 3), 3));
  CHECK(c.bytes() == 300);
  { CHECK(c.find(key(1))); }  // 1 is now the most recently used: 2 is the oldest
  REQUIRE(c.insert(key(4), bytes_of(100, 4), 4));
  CHECK(holds(c, {1, 3, 4}));
  CHECK_FALSE(c.contains(key(2)));
  CHECK(c.bytes() == 300);
  CHECK(c.stats()->evictions == 1);

  // One large entry evicts as many old ones as it needs, oldest first.
  REQUIRE(c.insert(key(5), bytes_of(180, 5), 5));
  CHECK(holds(c, {4, 5}));
  CHECK_FALSE(c.contains(key(1)));
  CHECK_FALSE(c.contains(key(3)));
  CHECK(c.bytes() == 280);
  CHECK(c.size() == 2);
  CHECK(c.stats()->evictions == 3);
  CHECK(c.stats()->bytes == 280);
  CHECK(c.stats()->entries == 2);

  // Larger than the whole cache: refused, nothing evicted.
  CHECK_FALSE(c.insert(key(6), bytes_of(301, 6), 6));
  CHECK(holds(c, {4, 5}));
  CHECK(c.stats()->refused == 1);
}

TEST_CASE("embedding cache: a hit returns the stored bytes and counts hits misses and bytes saved") {
  EmbeddingCache c(1000);
  std::vector<uint8_t> v(64);
  for (size_t i = 0; i < v.size(); ++i) v[i] = uint8_t(i * 7);
  REQUIRE(c.insert(key(9), v, 4));
  {
    auto hit = c.find(key(9));
    REQUIRE(hit);
    CHECK(hit->tokens() == 4);
    CHECK(std::vector<uint8_t>(hit->bytes().begin(), hit->bytes().end()) == v);
  }
  CHECK_FALSE(c.find(key(8)));
  CHECK(c.find(key(9)));
  CHECK(c.stats()->hits == 2);
  CHECK(c.stats()->misses == 1);
  CHECK(c.stats()->bytes_saved == 128);
  // Inserting a held hash again keeps the first copy (same content by definition of the key).
  REQUIRE(c.insert(key(9), bytes_of(64, 0), 4));
  CHECK(c.find(key(9))->bytes()[1] == 7);
  CHECK(c.stats()->inserts == 1);
}

TEST_CASE("embedding cache: a pinned entry is never evicted and its bytes stay valid") {
  EmbeddingCache c(200);
  REQUIRE(c.insert(key(1), bytes_of(100, 0xA1), 1));
  REQUIRE(c.insert(key(2), bytes_of(100, 0xA2), 2));
  auto pin = c.find(key(1));  // 1 pinned; also the most recently used
  REQUIRE(pin);
  // Touch 2 so that 1 is the least recently used: eviction must still skip it.
  { CHECK(c.find(key(2))); }
  REQUIRE(c.insert(key(3), bytes_of(100, 0xA3), 3));
  CHECK(holds(c, {1, 3}));
  CHECK_FALSE(c.contains(key(2)));

  SECTION("eviction while pinned: with only pinned entries left an insert is refused, not over the bound") {
    auto pin3 = c.find(key(3));
    REQUIRE(pin3);
    CHECK_FALSE(c.insert(key(4), bytes_of(100, 0xA4), 4));
    CHECK(c.bytes() == 200);
    CHECK(c.stats()->refused == 1);
    CHECK(holds(c, {1, 3}));
  }
  SECTION("a pinned entry's bytes are intact after other entries came and went") {
    for (uint8_t k = 10; k < 20; ++k) REQUIRE(c.insert(key(k), bytes_of(100, k), k));
    CHECK(c.contains(key(1)));
    CHECK(std::all_of(pin->bytes().begin(), pin->bytes().end(), [](uint8_t b) { return b == 0xA1; }));
    CHECK(c.bytes() == 200);
  }
  SECTION("once unpinned it is evictable again") {
    pin.reset();
    { CHECK(c.find(key(3))); }  // 1 is the oldest
    REQUIRE(c.insert(key(4), bytes_of(100, 0xA4), 4));
    CHECK(holds(c, {3, 4}));
    CHECK_FALSE(c.contains(key(1)));
  }
}

TEST_CASE("embedding cache: capacity 0 disables it and counts nothing") {
  EmbeddingCache c(0);
  CHECK_FALSE(c.enabled());
  CHECK_FALSE(c.insert(key(1), bytes_of(1, 1), 1));
  CHECK_FALSE(c.find(key(1)));
  CHECK(c.size() == 0);
  CHECK(c.stats()->misses == 0);
  CHECK(c.stats()->refused == 0);
  CHECK(c.stats()->capacity_bytes == 0);
}

TEST_CASE("content hash: taken over decoded pixels so two files of the same pixels give one hash") {
  const auto img = model::make_test_image(32, 24, 7);
  const auto ppm = model::encode_ppm(img);
  // The same raster in another PPM spelling: a comment and other whitespace in the header.
  const std::string header = "P6\n# written by another tool\n32   24\n255\n";
  const std::string file = header + std::string(img.rgb.begin(), img.rgb.end());
  const std::vector<uint8_t> other(file.begin(), file.end());
  REQUIRE(ppm != other);
  auto a = model::parse_ppm(ppm);
  auto b = model::parse_ppm(other);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  CHECK(content_hash(*a) == content_hash(*b));

  // The sample PNG and PPM of one gradient, decoded by the router's codec.
  const std::string dir = EPD_SOURCE_DIR "/configs/images/";
  auto png = model::read_image_file(dir + "gradient.png", 1u << 26);
  auto pnm = model::read_image_file(dir + "gradient.ppm", 1u << 26);
  REQUIRE(png.ok());
  REQUIRE(pnm.ok());
  REQUIRE(png->rgb == pnm->rgb);
  CHECK(content_hash(*png) == content_hash(*pnm));

  // One pixel channel off by one, or the same bytes in another shape: another image, another hash.
  auto changed = img;
  changed.rgb[100] ^= 1;
  CHECK(content_hash(changed) != content_hash(img));
  model::Image reshaped{24, 32, img.rgb};
  CHECK(content_hash(reshaped) != content_hash(img));
  CHECK(content_hash(model::make_test_image(32, 24, 8)) != content_hash(img));
}

TEST_CASE("content hash: a peer's hash is accepted only with exactly 32 bytes") {
  const auto h = content_hash(model::make_test_image(8, 8, 1));
  REQUIRE(h);
  CHECK(content_hash_from(std::vector<uint8_t>(h->begin(), h->end())) == h);
  CHECK_FALSE(content_hash_from(std::vector<uint8_t>(31, 0)));
  CHECK_FALSE(content_hash_from(std::vector<uint8_t>(33, 0)));
  CHECK_FALSE(content_hash_from({}));
}

// The staging ring (decode) and window (prefill): space is handed out in order, never straddles the end,
// and the watermark rule never lets a writer overwrite bytes that have not been consumed.
#include <catch2/catch.hpp>

#include <map>
#include <random>
#include <vector>

#include "cache/staging_ring.hpp"

using epd::actors::StagingRing;
using epd::actors::StagingWindow;
using epd::protocol::ErrorCode;
using epd::protocol::StagingRsp;
using epd::protocol::Watermark;

TEST_CASE("staging ring: grants in order, skips the end, wraps into rounds", "[staging]") {
  StagingRing ring(100);
  auto a = ring.reserve(1, 0, 40);
  auto b = ring.reserve(2, 0, 40);
  auto c = ring.reserve(1, 1, 40);  // 80 + 40 > 100: starts the next round
  REQUIRE(a);
  REQUIRE(b);
  REQUIRE(c);
  CHECK((a->offset == 0 && a->round == 0));
  CHECK((b->offset == 40 && b->round == 0));
  CHECK((c->offset == 0 && c->round == 1));
  CHECK(ring.rounds() == 1);
  CHECK(ring.used() == 140);  // the skipped 20 bytes count until the round before them is consumed
  CHECK(ring.watermark() == 0);

  CHECK_FALSE(ring.consume(2, 0));  // out of order: the front (room 1 chunk 0) is still unconsumed
  CHECK(ring.watermark() == 0);
  CHECK(ring.consume(1, 0));  // front consumed: the watermark jumps over room 2's consumed chunk too
  CHECK(ring.watermark() == 100);
  CHECK(ring.watermark_message() == Watermark{1, 0});
  CHECK(ring.consume(1, 1));
  CHECK(ring.watermark() == 140);
  CHECK(ring.used() == 0);
}

TEST_CASE("staging ring: oversized and duplicate requests are refused", "[staging]") {
  StagingRing ring(64);
  auto big = ring.reserve(1, 0, 65);
  REQUIRE_FALSE(big);
  CHECK(big.error().code == ErrorCode::oversized);
  CHECK(big.error().detail.find("can never fit") != std::string::npos);
  CHECK_FALSE(ring.reserve(1, 0, 0));
  REQUIRE(ring.reserve(1, 0, 64));
  auto dup = ring.reserve(1, 0, 8);
  REQUIRE_FALSE(dup);
  CHECK(dup.error().code == ErrorCode::invalid_request);
  CHECK(ring.chunks() == 1);
}

TEST_CASE("staging ring: releasing a room frees its unconsumed chunks", "[staging]") {
  StagingRing ring(100);
  REQUIRE(ring.reserve(7, 0, 30));
  REQUIRE(ring.reserve(8, 0, 30));
  REQUIRE(ring.reserve(7, 1, 30));
  CHECK_FALSE(ring.find(9, 0));
  CHECK(ring.find(7, 1)->offset == 60);
  CHECK(ring.release_room(7));  // room 7 failed: its chunk 0 at the front goes, room 8's stays
  CHECK(ring.watermark() == 30);
  CHECK_FALSE(ring.find(7, 1));
  CHECK(ring.consume(8, 0));
  CHECK(ring.used() == 0);
}

TEST_CASE("staging window: rejects grants outside the ring and watermarks going backwards", "[staging]") {
  StagingWindow w(100);
  CHECK(*w.position_of(StagingRsp{1, 0, {}, 60, 2, ""}, 40) == 260);
  CHECK(w.position_of(StagingRsp{1, 0, {}, 61, 2, ""}, 40).error().code == ErrorCode::out_of_range);
  CHECK_FALSE(w.position_of(StagingRsp{1, 0, {}, 100, 0, ""}, 1));
  CHECK_FALSE(w.position_of(StagingRsp{1, 0, {}, 0, ~uint64_t{0}, ""}, 1));  // overflow
  CHECK_FALSE(w.position_of(StagingRsp{1, 0, {}, 0, 0, ""}, 101));

  CHECK(w.may_write(0, 100));
  CHECK_FALSE(w.may_write(100, 1));  // round 1 needs round 0 consumed
  REQUIRE(w.advance(Watermark{1, 10}));
  CHECK(w.watermark() == 110);
  CHECK(w.may_write(200, 10));
  CHECK_FALSE(w.may_write(200, 11));
  CHECK(w.advance(Watermark{1, 5}).error().code == ErrorCode::invalid_request);  // backwards
  CHECK(w.advance(Watermark{0, 99}).error().code == ErrorCode::invalid_request);
  CHECK(w.advance(Watermark{2, 100}).error().code == ErrorCode::out_of_range);  // tail past the ring
  CHECK_FALSE(w.advance(Watermark{~uint64_t{0}, 0}));
  CHECK(w.watermark() == 110);           // every rejection left it alone
  REQUIRE(w.advance(Watermark{1, 10}));  // repeating the same watermark is fine
}

// Several writers share a small ring; chunks are written only when the window allows and consumed in a
// random order. A shadow of the ring records which chunk owns each byte: a write over bytes still owned by
// an unconsumed chunk is exactly the bug the watermark exists to prevent.
TEST_CASE("staging ring: random interleavings never overwrite unconsumed bytes", "[staging]") {
  std::mt19937_64 rng(GENERATE(1u, 2u, 3u, 4u, 5u));
  const uint64_t size = 256;
  StagingRing ring(size);
  StagingWindow window(size);
  struct Pending {
    uint64_t room;
    uint32_t chunk;
    uint64_t position, bytes;
    bool written = false;
  };
  std::vector<Pending> pending;
  std::vector<int64_t> owner(size, -1);  // chunk serial that wrote the byte and is not yet consumed
  std::map<int64_t, Pending> by_serial;
  int64_t serial = 0;
  uint64_t consumed = 0, waited = 0;
  for (int step = 0; step < 20000; ++step) {
    const int action = int(rng() % 3);
    if (action == 0 && pending.size() < 12) {
      const uint64_t bytes = 16 + rng() % 112;
      const uint64_t room = 1 + rng() % 8;
      const uint32_t chunk = uint32_t(serial);
      auto grant = ring.reserve(room, chunk, bytes);
      REQUIRE(grant);
      auto pos = window.position_of(StagingRsp{room, chunk, {}, grant->offset, grant->round, ""}, bytes);
      REQUIRE(pos);
      pending.push_back({room, chunk, *pos, bytes});
      ++serial;
    } else if (action == 1 && !pending.empty()) {  // a writer tries to write any granted chunk
      auto& p = pending[rng() % pending.size()];
      if (p.written) continue;
      if (!window.may_write(p.position, p.bytes)) {
        ++waited;
        continue;
      }
      for (uint64_t i = 0; i < p.bytes; ++i) {
        REQUIRE(owner[(p.position + i) % size] == -1);
        owner[(p.position + i) % size] = p.chunk;
      }
      p.written = true;
    } else if (action == 2) {  // decode scatters any written chunk, then reports its watermark
      std::vector<size_t> written;
      for (size_t i = 0; i < pending.size(); ++i)
        if (pending[i].written) written.push_back(i);
      if (written.empty()) continue;
      const size_t i = written[rng() % written.size()];
      const Pending p = pending[i];
      pending.erase(pending.begin() + long(i));
      for (uint64_t b = 0; b < p.bytes; ++b) owner[(p.position + b) % size] = -1;
      ring.consume(p.room, p.chunk);
      REQUIRE(window.advance(ring.watermark_message()));
      ++consumed;
    }
  }
  CHECK(consumed > 500);
  CHECK(ring.rounds() > 20);  // the ring wrapped many times
  CHECK(waited > 0);          // and writers did have to wait for the watermark
}

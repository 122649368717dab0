// Robustness: mutated and random buffers through the decoder; every result is a message or an error.
#include <catch2/catch.hpp>
#include <random>

#include "epd/protocol/codec.hpp"
#include "sample_messages.hpp"

using namespace epd::protocol;

TEST_CASE("decoder survives 120k mutated and random buffers", "[protocol][fuzz]") {
  std::vector<std::vector<uint8_t>> seeds;
  epd::protocol::testing::for_each_message_type([&](auto tag) {
    using T = decltype(tag);
    seeds.push_back(encode(Envelope{"fuzz", 1, epd::protocol::testing::sample<T>(3)}));
  });
  std::mt19937_64 rng(12345);
  CodecLimits limits;
  limits.max_array = 4096;
  limits.max_bin = 1 << 16;
  limits.max_str = 1 << 16;
  size_t ok = 0, errors = 0;
  for (int i = 0; i < 120000; ++i) {
    std::vector<uint8_t> buf;
    if (i % 4 == 0) {
      // Pure random bytes, sometimes with a valid header in front.
      buf.resize(rng() % 96);
      for (auto& b : buf) b = uint8_t(rng());
      if (i % 8 == 0) {
        const auto& s = seeds[rng() % seeds.size()];
        buf.insert(buf.begin(), s.begin(), s.begin() + std::min<size_t>(s.size(), 24));
      }
    } else {
      buf = seeds[rng() % seeds.size()];
      const int flips = 1 + int(rng() % 6);
      for (int k = 0; k < flips; ++k) {
        switch (rng() % 4) {
          case 0: buf[rng() % buf.size()] ^= uint8_t(1u << (rng() % 8)); break;
          case 1: buf[rng() % buf.size()] = uint8_t(rng()); break;
          case 2: buf.resize(rng() % (buf.size() + 1)); break;
          default: buf.insert(buf.begin() + (rng() % (buf.size() + 1)), uint8_t(rng())); break;
        }
        if (buf.empty()) break;
      }
    }
    auto r = decode(buf, limits);
    if (r.ok()) {
      ++ok;
      // A decoded message re-encodes and decodes to itself.
      auto again = decode(encode(*r), limits);
      REQUIRE(again.ok());
    } else {
      ++errors;
      REQUIRE(r.error().code != ErrorCode::ok);
    }
  }
  CHECK(ok + errors == 120000);
  CHECK(errors > 0);
  CHECK(ok > 0);  // some mutations keep the frame valid (e.g. a changed integer)
}

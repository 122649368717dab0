#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "epd/actors/load_gauge.hpp"

using namespace epd::actors;
using epd::protocol::LoadReport;

namespace {

// Gives the n-th figure the value n + 2 (bools: true), through fields(), so a figure added later is covered.
struct Numbering {
  uint64_t n = 0;
  std::vector<std::string> keys;
  template <class T>
  void opt(std::string_view key, std::atomic<T>& figure) {
    keys.emplace_back(key);
    figure = T(++n + 1);
  }
  template <class T>
  void opt(std::string_view key, T& figure) {
    keys.emplace_back(key);
    if constexpr (std::is_arithmetic_v<T>) figure = T(++n + 1);
  }
  void opt(std::string_view key, StagingGauge&) { keys.emplace_back(key); }
};

}  // namespace

TEST_CASE("a load gauge's snapshot carries every figure to the same key", "[actors][load]") {
  LoadGauge gauge;
  Numbering write;
  LoadGauge::fields(gauge, write);
  LoadReport expected;
  Numbering want;
  LoadReport::fields(expected, want);
  expected.staging.reset();  // the gauge is not staging
  REQUIRE(want.keys == write.keys);
  REQUIRE(write.n >= 12);

  const LoadReport got = gauge.snapshot();
  CHECK(got == expected);
  CHECK(got.quarantined_pages == expected.quarantined_pages);
  CHECK(got.free_kv_pages != got.total_kv_pages);  // distinct values: no figure was read from a neighbour
  CHECK_FALSE(got.staging.has_value());
}

TEST_CASE("a staging gauge is reported once active, and ring_peak restarts every snapshot",
          "[actors][load]") {
  LoadGauge gauge;
  gauge.staging.active = true;
  gauge.staging.ring_bytes = 1024;
  gauge.staging.note_ring_use(700);
  gauge.staging.note_ring_use(100);
  auto first = gauge.snapshot();
  REQUIRE(first.staging.has_value());
  CHECK(first.staging->ring_bytes == 1024);
  CHECK(first.staging->ring_used == 100);
  CHECK(first.staging->ring_peak == 700);
  auto second = gauge.snapshot();
  REQUIRE(second.staging.has_value());
  CHECK(second.staging->ring_peak == 100);  // the highest use since the previous heartbeat
}

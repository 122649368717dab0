// The per-session failure rate that decides when a transfer session is recycled.
#include <catch2/catch.hpp>

#include "failure_window.hpp"

using epd::actors::FailureWindow;

TEST_CASE("failure window: needs half a window of outcomes before it judges a rate", "[failure_window]") {
  FailureWindow w(10, 50);
  for (int i = 0; i < 4; ++i) w.record(true);
  CHECK_FALSE(w.above_threshold());  // 4 of 4 failed, but 4 outcomes are not a rate yet
  w.record(true);
  CHECK(w.above_threshold());
  CHECK(w.samples() == 5);
  CHECK(w.failures() == 5);
}

TEST_CASE("failure window: old outcomes slide out", "[failure_window]") {
  FailureWindow w(4, 50);
  w.record(true);
  w.record(true);
  w.record(false);
  w.record(false);
  CHECK(w.above_threshold());  // 2 of 4
  w.record(false);
  CHECK(w.failures() == 1);  // the first failure slid out
  CHECK_FALSE(w.above_threshold());
  w.record(false);
  CHECK(w.failures() == 0);
  CHECK(w.samples() == 4);
}

TEST_CASE("failure window: a low rate stays below the threshold, 0 disables it", "[failure_window]") {
  FailureWindow w(20, 25);
  for (int i = 0; i < 100; ++i) w.record(i % 10 == 0);  // 10%
  CHECK_FALSE(w.above_threshold());
  FailureWindow off(4, 0);
  for (int i = 0; i < 8; ++i) off.record(true);
  CHECK_FALSE(off.above_threshold());
}

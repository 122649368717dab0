#include <catch2/catch.hpp>

#include "epd/launcher/exit_status.hpp"
#include "epd/launcher/restart_tracker.hpp"

#include <signal.h>

using namespace std::chrono_literals;
using epd::launcher::RestartPolicy;
using epd::launcher::RestartTracker;

TEST_CASE("restart backoff doubles from the initial delay and is capped", "[launcher][unit]") {
  RestartPolicy p;  // defaults: 200 ms doubling to 5 s, 5 restarts per minute
  p.max_restarts = 10;
  RestartTracker t(p);
  auto now = RestartTracker::Clock::time_point{} + 1h;
  std::vector<long long> delays;
  for (int i = 0; i < 7; ++i) {
    auto d = t.on_exit(now + i * 1ms);
    REQUIRE(d.restart);
    CHECK(d.attempt == uint32_t(i + 1));
    delays.push_back(d.delay.count());
  }
  CHECK(delays == std::vector<long long>{200, 400, 800, 1600, 3200, 5000, 5000});
  CHECK(t.total_restarts() == 7);
}

TEST_CASE("restart limit within the window gives up, and the window slides", "[launcher][unit]") {
  RestartPolicy p;
  RestartTracker t(p);
  auto t0 = RestartTracker::Clock::time_point{} + 1h;
  for (int i = 0; i < 5; ++i) REQUIRE(t.on_exit(t0 + i * 1s).restart);
  auto sixth = t.on_exit(t0 + 10s);
  CHECK_FALSE(sixth.restart);
  CHECK(t.total_restarts() == 5);
  // A minute after the first restart, one slot is free again, and the backoff reflects 5 recent restarts.
  auto later = t.on_exit(t0 + 60s);
  REQUIRE(later.restart);
  CHECK(later.attempt == 5);
  CHECK(later.delay == 3200ms);
  // After a long quiet spell the backoff starts over.
  auto fresh = t.on_exit(t0 + 10min);
  REQUIRE(fresh.restart);
  CHECK(fresh.attempt == 1);
  CHECK(fresh.delay == 200ms);
}

TEST_CASE("restarts disabled never restart", "[launcher][unit]") {
  RestartPolicy p;
  p.enabled = false;
  RestartTracker t(p);
  CHECK_FALSE(t.on_exit(RestartTracker::Clock::now()).restart);
  CHECK(t.total_restarts() == 0);
}

TEST_CASE("wait statuses and durations read well in logs", "[launcher][unit]") {
  using epd::launcher::describe_ms;
  using epd::launcher::describe_wait_status;
  CHECK(describe_wait_status(3 << 8) == "exited with status 3");
  CHECK(describe_wait_status(SIGKILL) == "killed by signal 9 (SIGKILL)");
  CHECK(describe_ms(400) == "400 ms");
  CHECK(describe_ms(60000) == "60 s");
  CHECK(describe_ms(1500) == "1500 ms");
}

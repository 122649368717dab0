// The failed-authentication throttle on a fake clock: its window, its cooldown, its bound on addresses.
#include "epd/http/auth_throttle.hpp"

#include <catch2/catch.hpp>

using namespace epd::http;
using namespace std::chrono_literals;

TEST_CASE("auth throttle: failures within the window start a cooldown for that address only", "[http]") {
  AuthThrottle t({.max_failures = 3, .window = 10s, .cooldown = 20s, .max_addresses = 16});
  const auto t0 = AuthThrottle::Clock::time_point{} + 1000s;
  t.failed("10.0.0.1", t0);
  t.failed("10.0.0.1", t0 + 1s);
  CHECK(t.blocked_for("10.0.0.1", t0 + 2s) == 0);
  t.failed("10.0.0.1", t0 + 2s);
  CHECK(t.blocked_for("10.0.0.1", t0 + 2s) == 20);
  CHECK(t.blocked_for("10.0.0.1", t0 + 21500ms) == 1);  // rounded up
  CHECK(t.blocked_for("10.0.0.2", t0 + 3s) == 0);
  CHECK(t.blocked_for("10.0.0.1", t0 + 22s) == 0);  // served its time
  CHECK(t.throttled() == 2);
  // After the cooldown the count starts again from zero.
  t.failed("10.0.0.1", t0 + 23s);
  t.failed("10.0.0.1", t0 + 24s);
  CHECK(t.blocked_for("10.0.0.1", t0 + 24s) == 0);
}

TEST_CASE("auth throttle: failures spread wider than the window never block", "[http]") {
  AuthThrottle t({.max_failures = 3, .window = 10s, .cooldown = 20s, .max_addresses = 16});
  const auto t0 = AuthThrottle::Clock::time_point{} + 1000s;
  for (int i = 0; i < 10; ++i) {
    t.failed("10.0.0.1", t0 + std::chrono::seconds(6 * i));
    CHECK(t.blocked_for("10.0.0.1", t0 + std::chrono::seconds(6 * i)) == 0);
  }
}

TEST_CASE("auth throttle: a flood of sources is bounded and a blocked address is kept", "[http]") {
  AuthThrottle t({.max_failures = 2, .window = 10s, .cooldown = 60s, .max_addresses = 8});
  const auto t0 = AuthThrottle::Clock::time_point{} + 1000s;
  t.failed("attacker", t0);
  t.failed("attacker", t0);
  for (int i = 0; i < 1000; ++i) t.failed("source-" + std::to_string(i), t0 + 1s);
  CHECK(t.tracked() <= 8);
  CHECK(t.blocked_for("attacker", t0 + 2s) > 0);
}

TEST_CASE("auth throttle: the address of a remote endpoint", "[http]") {
  CHECK(remote_address("10.1.2.3:5678") == "10.1.2.3");
  CHECK(remote_address("::1:5678") == "::1");
  CHECK(remote_address("[fe80::1]:80") == "fe80::1");
  CHECK(remote_address("?") == "?");
}

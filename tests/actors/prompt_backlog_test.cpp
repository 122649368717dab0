// The router's prompt backlog: the rate it measures and the wait it predicts, on a clock the test drives.
#include <catch2/catch.hpp>

#include "roles/prompt_backlog.hpp"

using epd::actors::PromptBacklog;

namespace prompt_backlog_test {

const PromptBacklog::clock::time_point t0{};
PromptBacklog::clock::time_point at(double seconds) {
  return t0 +
         std::chrono::duration_cast<PromptBacklog::clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace prompt_backlog_test

using namespace prompt_backlog_test;

TEST_CASE("prompt backlog: no rate and no wait before a prompt is answered", "[router][admission]") {
  PromptBacklog b;
  CHECK_FALSE(b.tokens_per_second());
  b.add(500, at(0));
  b.dropped(500, at(3));  // a cancelled prompt measures nothing
  CHECK(b.tokens() == 0);
  CHECK_FALSE(b.tokens_per_second());
  CHECK_FALSE(b.wait_seconds(100));
}

TEST_CASE("prompt backlog: the rate is tokens answered over time with a backlog, idle time aside",
          "[router][admission]") {
  PromptBacklog b;
  b.add(200, at(10));
  b.answered(200, at(12));
  REQUIRE(b.tokens_per_second());
  CHECK(*b.tokens_per_second() == Approx(100));
  // A minute idle, then a prompt answered at the same pace: still 100 tokens/s, not 400 / 63 s.
  b.add(200, at(72));
  b.answered(200, at(74));
  CHECK(*b.tokens_per_second() == Approx(100));
  // Two prompts together, 300 tokens answered over 3 s of backlog: 100 tokens/s but for the fading between
  // the two answers (their samples, 100 in 2 s and 200 in 1 s, weigh a little differently).
  b.add(100, at(80));
  b.add(200, at(81));
  b.answered(100, at(82));
  b.answered(200, at(83));
  CHECK(*b.tokens_per_second() == Approx(100).epsilon(0.01));
}

TEST_CASE("prompt backlog: the wait is the tokens ahead and its own over the rate", "[router][admission]") {
  PromptBacklog b;
  b.add(100, at(0));
  b.answered(100, at(1));  // 100 tokens/s
  b.add(300, at(5));
  b.add(60, at(5));
  b.recount(300, 200, at(6));  // placed where 100 of its tokens were cached
  CHECK(b.tokens() == 260);
  REQUIRE(b.wait_seconds(40));
  CHECK(*b.wait_seconds(40) == Approx(3.0));
  b.dropped(60, at(6));
  CHECK(*b.wait_seconds(0) == Approx(2.0));
}

TEST_CASE("prompt backlog: a slower cluster shows within a few memories of busy time",
          "[router][admission]") {
  PromptBacklog b(std::chrono::seconds(10));
  double t = 0;
  for (int i = 0; i < 100; ++i, t += 1) {  // 100 s at 1000 tokens/s
    b.add(1000, at(t));
    b.answered(1000, at(t + 1));
  }
  CHECK(*b.tokens_per_second() == Approx(1000));
  for (int i = 0; i < 30; ++i, t += 1) {  // then 30 s at 100 tokens/s
    b.add(100, at(t));
    b.answered(100, at(t + 1));
  }
  // e^-3 of the old rate's weight is left: 1000 e^-3 + 100 (1 - e^-3) = 144.8 tokens/s.
  CHECK(*b.tokens_per_second() == Approx(100 + 900 * std::exp(-3.0)).epsilon(0.001));
}

#pragma once
// The router's estimate of how long a new prompt would wait for its first token: the prompt tokens it has
// accepted and not yet seen answered (queued at the router or placed on a prefill), over the rate at which
// the cluster has been measured to answer them while it had any. Time with nothing to answer does not
// count, so a cluster that was idle does not look slow. Admission refuses a request whose estimated wait
// is longer than it may be (429 with Retry-After) instead of letting it fail late with a 504.
#include <chrono>
#include <cstdint>
#include <optional>

namespace epd::actors {

class PromptBacklog {
 public:
  using clock = std::chrono::steady_clock;
  // Measurements fade with busy time: `memory` of it later they weigh 1/e of a new one.
  explicit PromptBacklog(std::chrono::duration<double> memory = std::chrono::seconds(20));

  void add(uint64_t tokens, clock::time_point now);
  // A prompt counted as `from` tokens now counts `to` (placed: only its uncached part is work).
  void recount(uint64_t from, uint64_t to, clock::time_point now);
  // Its first token came: the prompt is answered and counts toward the measured rate.
  void answered(uint64_t tokens, clock::time_point now);
  // It left unanswered (failed, cancelled, timed out): no measurement.
  void dropped(uint64_t tokens, clock::time_point now);

  uint64_t tokens() const { return tokens_; }
  // Prompt tokens answered per second of busy time; none before the first answer.
  std::optional<double> tokens_per_second() const;
  // Seconds until a prompt of `tokens` more would be answered behind the backlog, at the measured rate.
  std::optional<double> wait_seconds(uint64_t tokens) const;

 private:
  void advance(clock::time_point now);

  double memory_s_;
  uint64_t tokens_ = 0;
  double answered_ = 0;      // tokens answered, faded
  double busy_s_ = 0;        // seconds with a backlog until the last answer, faded alike
  double unmeasured_s_ = 0;  // seconds with a backlog since the last answer
  std::optional<clock::time_point> last_;
};

}  // namespace epd::actors

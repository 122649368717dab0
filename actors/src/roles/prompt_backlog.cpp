#include "roles/prompt_backlog.hpp"

#include <algorithm>
#include <cmath>

namespace epd::actors {

PromptBacklog::PromptBacklog(std::chrono::duration<double> memory) : memory_s_(memory.count()) {}

// Busy time counts only while some prompt waits. It is measured against the tokens answered at the end of
// it; at each answer both sums fade by the same weight, w = e^(-busy/memory), so a lone answer's rate is
// exactly its tokens over its busy time, and a long run's is a recent average.
void PromptBacklog::advance(clock::time_point now) {
  if (last_ && tokens_ > 0 && now > *last_)
    unmeasured_s_ += std::chrono::duration<double>(now - *last_).count();
  if (!last_ || now > *last_) last_ = now;
}

void PromptBacklog::add(uint64_t tokens, clock::time_point now) {
  advance(now);
  tokens_ += tokens;
}

void PromptBacklog::recount(uint64_t from, uint64_t to, clock::time_point now) {
  advance(now);
  tokens_ = tokens_ - std::min(tokens_, from) + to;
}

void PromptBacklog::answered(uint64_t tokens, clock::time_point now) {
  advance(now);
  tokens_ -= std::min(tokens_, tokens);
  const double w = std::exp(-unmeasured_s_ / memory_s_);
  answered_ = answered_ * w + double(tokens);
  busy_s_ = busy_s_ * w + unmeasured_s_;
  unmeasured_s_ = 0;
}

void PromptBacklog::dropped(uint64_t tokens, clock::time_point now) {
  advance(now);
  tokens_ -= std::min(tokens_, tokens);
}

std::optional<double> PromptBacklog::tokens_per_second() const {
  if (answered_ <= 0 || busy_s_ <= 0) return std::nullopt;
  return answered_ / busy_s_;
}

std::optional<double> PromptBacklog::wait_seconds(uint64_t tokens) const {
  const auto rate = tokens_per_second();
  if (!rate) return std::nullopt;
  return double(tokens_ + tokens) / *rate;
}

}  // namespace epd::actors

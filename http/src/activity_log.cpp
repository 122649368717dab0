#include "epd/http/activity_log.hpp"

#include <chrono>
#include <nlohmann/json.hpp>

namespace epd::http {
namespace {

// Cut at a character boundary, so the clipped message stays valid UTF-8 when it was.
std::string clip_utf8(std::string s, size_t max) {
  if (s.size() <= max) return s;
  size_t end = max;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  s.resize(end);
  return s + "...";
}

}  // namespace

ActivityLog::ActivityLog(size_t capacity) : capacity_(capacity) {
  ring_.reserve(capacity);
}

void ActivityLog::record(ActivityEntry e) {
  e.finished_unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  e.error = clip_utf8(std::move(e.error), kMaxErrorBytes);
  std::lock_guard lock(mu_);
  e.seq = ++recorded_;
  completion_tokens_ += e.completion_tokens;
  if (capacity_ == 0) return;
  if (ring_.size() < capacity_) {
    ring_.push_back(std::move(e));
  } else {
    ring_[next_] = std::move(e);
  }
  next_ = (next_ + 1) % capacity_;
}

ActivityLog::Snapshot ActivityLog::snapshot() const {
  std::lock_guard lock(mu_);
  Snapshot s;
  s.recorded = recorded_;
  s.completion_tokens = completion_tokens_;
  s.capacity = capacity_;
  s.entries.reserve(ring_.size());
  // next_ is one past the newest; walk backwards from it.
  for (size_t i = 0; i < ring_.size(); ++i)
    s.entries.push_back(ring_[(next_ + ring_.size() - 1 - i) % ring_.size()]);
  return s;
}

std::string activity_json(const ActivityLog::Snapshot& s) {
  using nlohmann::json;
  json entries = json::array();
  for (const auto& e : s.entries) {
    json error = nullptr;
    if (!e.error_code.empty()) error = {{"code", e.error_code}, {"message", e.error}};
    entries.push_back({{"seq", e.seq},
                       {"finished_unix_ms", e.finished_unix_ms},
                       {"request_id", e.request_id},
                       {"route", e.route},
                       {"stream", e.stream},
                       {"status", e.status},
                       {"error", std::move(error)},
                       {"first_token_ms", e.first_token_ms},
                       {"total_ms", e.total_ms},
                       {"prompt_tokens", e.prompt_tokens},
                       {"completion_tokens", e.completion_tokens},
                       {"attempts", e.attempts}});
  }
  json out = {{"recorded", s.recorded},
              {"completion_tokens", s.completion_tokens},
              {"capacity", s.capacity},
              {"entries", std::move(entries)}};
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace epd::http

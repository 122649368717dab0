#include "membership/list_resend.hpp"

#include <algorithm>

namespace epd::actors {

void ListResend::sent(const std::string& id, uint64_t version, clock::time_point now) {
  auto& m = members_[id];
  m.list_version = version;
  m.list_at = now;
}

void ListResend::delivered(clock::duration took, clock::time_point now) {
  if (took >= slowest_ || now - slowest_at_ > kRecentWaits * wait_) {
    slowest_ = took;
    slowest_at_ = now;
  }
}

ListResend::clock::duration ListResend::patience(clock::time_point now) const {
  if (now - slowest_at_ > kRecentWaits * wait_) return wait_;
  return std::max(wait_, 2 * slowest_);
}

ListResend::Due ListResend::due(const std::string& id, uint64_t held, bool asked, uint64_t current,
                                clock::time_point now) {
  auto it = members_.find(id);
  if (it != members_.end() && it->second.list_version && held >= it->second.list_version) {
    delivered(now - it->second.list_at, now);  // the list on its way arrived
    it->second.list_version = 0;
  }
  if (!asked && held >= current) {  // up to date
    if (it != members_.end()) members_.erase(it);
    return {};
  }
  if (!asked && held == 0) return {};  // an older build: it says nothing to compare with
  if (it == members_.end()) it = members_.emplace(id, Member{}).first;
  auto& m = it->second;
  const auto resend = [&](Why why, clock::duration waited) {
    if (waited < patience(now) * m.backoff) return Due{};
    m.backoff = std::min(m.backoff * 2, kMaxBackoff);
    m.held = 0;
    return Due{why, waited};
  };
  if (m.list_version > held) return resend(Why::list_late, now - m.list_at);  // late, or (rarely) lost
  if (asked) return {Why::asked, {}};
  if (m.held != held) {  // it moved (or just fell behind): late readers move
    m.held = held;
    m.held_since = now;
    return {};
  }
  return resend(Why::stood_still, now - m.held_since);
}

}  // namespace epd::actors

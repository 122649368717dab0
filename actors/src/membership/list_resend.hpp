#pragma once
// When the embedded registry sends a member the full PEERS list again. A control connection delivers in
// order and loses frames only when it breaks (the registry then drops the member), so a list that has not
// arrived is almost always late: at a large start a member on a busy host reads seconds behind, and a list
// sent again on every HEARTBEAT that asked for it cost thousands of lists of thousands of entries. Each
// HEARTBEAT carries the version the member holds, which says whether the last list sent to it arrived:
// - it asked (a gap, or no list yet) and no list is on its way: at once;
// - a list is on its way: again only once it has been on its way `wait`;
// - it holds the same older version for `wait` with no list on its way: the last delta of a burst was lost
//   with no later one to show the gap.
// Each resend for lateness doubles that member's next wait, up to 4 times; catching up resets it.
// The wait is at least twice the slowest delivery seen lately (a list's arrival, as the member's HEARTBEATs
// tell it): when the members' hosts read lists a minute late, a list on its way 30 s is not lost, and each
// list sent again lengthens the queue it waits in (5,000 simulated instances on two cores: 7,182 lists
// sent again at the start, none needed).
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace epd::actors {

class ListResend {
 public:
  using clock = std::chrono::steady_clock;
  explicit ListResend(clock::duration wait) : wait_(wait) {}

  // A full list at `version` went to `id` (it joined, or due() said so).
  void sent(const std::string& id, uint64_t version, clock::time_point now);
  void forget(const std::string& id) { members_.erase(id); }

  enum class Why {
    none,         // nothing to send
    asked,        // it found a gap (or has no list) and none is on its way
    list_late,    // the last list sent to it has been on its way for `waited`
    stood_still,  // it has held one older version for `waited`
  };
  struct Due {
    Why why = Why::none;
    clock::duration waited{};
    bool send() const { return why != Why::none; }
  };
  // On a HEARTBEAT of `id`: it holds version `held` (0: none, or an older build that does not say), asked
  // for the list or not, and ours is `current`.
  Due due(const std::string& id, uint64_t held, bool asked, uint64_t current, clock::time_point now);

 private:
  struct Member {
    uint64_t list_version = 0;  // the last full list sent to it; on its way while it holds less
    clock::time_point list_at{};
    uint64_t held = 0;  // the older version it held at its last HEARTBEAT, since `held_since`
    clock::time_point held_since{};
    uint32_t backoff = 1;
  };
  static constexpr uint32_t kMaxBackoff = 4;
  static constexpr int kRecentWaits = 10;  // "lately": within this many waits of the slowest delivery
  clock::duration wait_;
  clock::duration slowest_{};  // the slowest delivery seen lately, and when
  clock::time_point slowest_at_{};

  void delivered(clock::duration took, clock::time_point now);
  clock::duration patience(clock::time_point now) const;
  std::map<std::string, Member> members_;  // only members behind ours, or with a list on its way
};

}  // namespace epd::actors

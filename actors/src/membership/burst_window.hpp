#pragma once
// How long a membership publisher (the registry, a router relaying etcd) gathers changes before it sends
// every member one message for all of them. A lone change goes at once. While changes keep coming within the
// window (a start, a rolling restart) each window is twice the last, up to `longest`, so a burst costs every
// member fewer, larger messages; the next lone change starts from the shortest window again.
#include <algorithm>
#include <chrono>

namespace epd::actors {

class BurstWindow {
 public:
  using clock = std::chrono::steady_clock;

  BurstWindow(std::chrono::milliseconds shortest, std::chrono::milliseconds longest)
      : shortest_(shortest), longest_(std::max(shortest, longest)), window_(shortest) {}

  // A change came at `now`; the last send was at `last`. How long it waits for the window's end (zero: it
  // goes at once).
  clock::duration wait(clock::time_point last, clock::time_point now) {
    const auto due = last + window_;
    if (now >= due) {
      window_ = shortest_;
      return clock::duration::zero();
    }
    window_ = std::min(window_ * 2, longest_);  // the window that starts when this one ends
    return due - now;
  }

 private:
  std::chrono::milliseconds shortest_, longest_, window_;
};

}  // namespace epd::actors

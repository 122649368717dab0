#pragma once
// Runs the process out of file descriptors while it lives: RLIMIT_NOFILE is lowered to the lowest free
// descriptor, so the next one opened (a socket, an eventfd, an epoll set) fails with EMFILE. Restored on
// destruction, also when a REQUIRE throws.
#include <fcntl.h>
#include <sys/resource.h>

namespace epd::testing {

class NoFreeDescriptors {
 public:
  NoFreeDescriptors() {
    if (getrlimit(RLIMIT_NOFILE, &before_) != 0) return;
    int lowest_free = 0;
    while (fcntl(lowest_free, F_GETFD) != -1) ++lowest_free;
    rlimit tight = before_;
    tight.rlim_cur = rlim_t(lowest_free);
    active_ = setrlimit(RLIMIT_NOFILE, &tight) == 0;
  }
  ~NoFreeDescriptors() { restore(); }
  NoFreeDescriptors(const NoFreeDescriptors&) = delete;
  NoFreeDescriptors& operator=(const NoFreeDescriptors&) = delete;

  bool active() const { return active_; }
  void restore() {
    if (active_) setrlimit(RLIMIT_NOFILE, &before_);
    active_ = false;
  }

 private:
  rlimit before_{};
  bool active_ = false;
};

}  // namespace epd::testing

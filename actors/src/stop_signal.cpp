#include "epd/actors/stop_signal.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace epd::actors {
namespace {

int pipe_fds[2] = {-1, -1};

sigset_t stop_set() {
  sigset_t s;
  sigemptyset(&s);
  sigaddset(&s, SIGINT);
  sigaddset(&s, SIGTERM);
  return s;
}

// Async-signal-safe: one write to a non-blocking pipe; a full pipe drops the byte (one is enough).
void on_stop_signal(int sig) {
  const int saved = errno;
  const char b = char(sig);
  [[maybe_unused]] const ssize_t n = ::write(pipe_fds[1], &b, 1);
  errno = saved;
}

}  // namespace

void block_stop_signals() {
  const sigset_t s = stop_set();
  pthread_sigmask(SIG_BLOCK, &s, nullptr);
}

protocol::Status install_stop_handler() {
  if (pipe_fds[0] >= 0) return {};
  // Without the pipe there is no safe way to hear a stop: refuse to start rather than die mid-drain later.
  if (::pipe2(pipe_fds, O_CLOEXEC | O_NONBLOCK) != 0)
    return protocol::make_error(protocol::ErrorCode::internal,
                                std::string("cannot create the stop-signal pipe: ") + std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return {};
}

int wait_for_stop_signal() {
  const sigset_t s = stop_set();
  // Signals pending from before (blocked everywhere) are delivered here, to the handler, once unblocked.
  pthread_sigmask(SIG_UNBLOCK, &s, nullptr);
  for (;;) {
    pollfd p{pipe_fds[0], POLLIN, 0};
    ::poll(&p, 1, -1);  // EINTR: our own handler ran on this thread; the byte is there to read
    char b = 0;
    if (::read(pipe_fds[0], &b, 1) == 1) return int(static_cast<unsigned char>(b));
  }
}

}  // namespace epd::actors

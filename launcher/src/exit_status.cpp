#include "epd/launcher/exit_status.hpp"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

namespace epd::launcher {

std::string describe_wait_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    std::string out = "killed by signal " + std::to_string(sig);
    if (const char* abbrev = sigabbrev_np(sig)) out += std::string(" (SIG") + abbrev + ")";
    if (WCOREDUMP(status)) out += ", core dumped";
    return out;
  }
  return "ended with wait status " + std::to_string(status);
}

std::string describe_ms(long long ms) {
  if (ms >= 1000 && ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  return std::to_string(ms) + " ms";
}

}  // namespace epd::launcher

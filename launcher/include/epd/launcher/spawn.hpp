#pragma once
// Starts one child process: its own process group (so stop reaches its grandchildren too), stdout and
// stderr into one pipe we read, stdin from /dev/null, default signal dispositions and an empty signal
// mask, and PR_SET_PDEATHSIG(SIGTERM) so a launcher that crashes takes the child with it.
#include <sys/types.h>

#include "epd/launcher/child_spec.hpp"
#include "epd/protocol/result.hpp"

namespace epd::launcher {

struct SpawnedChild {
  pid_t pid = -1;
  int output_fd = -1;  // read end of the child's stdout+stderr pipe, non-blocking, close-on-exec
};

// Fails (io_error) when fork fails or exec fails in the child (e.g. no such file); nothing is left
// running then. PDEATHSIG fires when the calling *thread* ends, so call it from a long-lived thread.
protocol::Result<SpawnedChild> spawn_child(const ChildSpec& spec);

}  // namespace epd::launcher

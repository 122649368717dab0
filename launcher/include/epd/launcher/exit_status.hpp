#pragma once
// Human-readable wait status: "exited with status 1", "killed by signal 9 (SIGKILL)".
#include <string>

namespace epd::launcher {

std::string describe_wait_status(int status);
// "1.5 s", "400 ms": durations in log lines.
std::string describe_ms(long long ms);

}  // namespace epd::launcher

#pragma once
// The host's load average (/proc/loadavg: 1, 5 and 15 minutes), printed beside timings taken on a machine
// that other work may share.
#include <fstream>
#include <string>

namespace epd::bench {

inline std::string load_average() {
  std::ifstream f("/proc/loadavg");
  std::string one, five, fifteen;
  f >> one >> five >> fifteen;
  return one + " " + five + " " + fifteen;
}

}  // namespace epd::bench

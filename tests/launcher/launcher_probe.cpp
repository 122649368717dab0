// A launcher-like process for the PDEATHSIG test: runs each argument as `/bin/sh -c ARG` (ids c0, c1, ...)
// in a ProcessGroup printing to stdout, then waits to be killed.
#include <unistd.h>

#include <string>
#include <vector>

#include "epd/launcher/process_group.hpp"

int main(int argc, char** argv) {
  using namespace epd::launcher;
  std::vector<ChildSpec> specs;
  for (int i = 1; i < argc; ++i) specs.push_back({"c" + std::to_string(i - 1), {"/bin/sh", "-c", argv[i]}});
  auto sink = std::make_shared<FdSink>(1);
  ProcessGroup group(GroupOptions{}, sink);
  if (!group.start(specs)) return 1;
  sink->write_line("probe: all started");
  for (;;) pause();
}

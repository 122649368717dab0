// epd-bench <subcommand> [args]: one binary for every benchmark.
#include <cstdio>
#include <cstring>

#include "transfer_bench.hpp"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int, char**);
  const char* help;
};

constexpr Subcommand kSubcommands[] = {
    {"transfer", &run_transfer_bench, "transfer engine throughput/latency (shm, tcp, rdma) vs baselines"},
};

int usage(const char* argv0) {
  std::fprintf(stderr, "usage: %s <subcommand> [args]\n", argv0);
  for (const auto& s : kSubcommands) std::fprintf(stderr, "  %-10s %s\n", s.name, s.help);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(argv[0]);
  for (const auto& s : kSubcommands)
    if (std::strcmp(argv[1], s.name) == 0) return s.run(argc - 1, argv + 1);
  return usage(argv[0]);
}

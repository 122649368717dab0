// epd-bench <subcommand> [flags]: one executable, one entry per benchmark.
#include <cstdio>
#include <cstring>

#include "cache_bench.hpp"
#include "control_plane_bench.hpp"
#include "e2e_bench.hpp"
#include "grammar_bench.hpp"
#include "membership_bench.hpp"
#include "model_bench.hpp"
#include "placement_bench.hpp"
#include "prefix_bench.hpp"
#include "routers_bench.hpp"
#include "serve_bench.hpp"
#include "soak_bench.hpp"
#include "transfer_bench.hpp"
#include "vision_bench.hpp"
#include "vqa_bench.hpp"

namespace {

struct Subcommand {
  const char* name;
  int (*run)(int argc, char** argv);
  const char* help;
};

// Add a benchmark by adding a row.
constexpr Subcommand kSubcommands[] = {
    {"transfer", run_transfer_bench, "transfer engine throughput/latency (shm, tcp, rdma) vs baselines"},
    {"model", run_model_bench, "reference model: prefill/decode tokens/s, KV bytes per token"},
    {"e2e", run_e2e_bench, "cluster TTFT/TPOT/throughput vs colocated; control-plane rooms/s and latency"},
    {"control-plane", run_control_plane_cli,
     "BOOTSTRAP -> KV_STATUS latency and rooms/s vs a bare ZeroMQ round trip (plain and CURVE)"},
    {"membership", epd::bench::run_membership_cli,
     "membership of 1,000s of simulated instances in worker processes (embedded registry, etcd): "
     "convergence, bytes, CPU"},
    {"placement", run_placement_bench,
     "the router's placement cost per request at 10-5,000 instances per role: index vs scoring every one"},
    {"routers", epd::bench::run_routers_cli,
     "etcd, 2 routers vs embedded, 1: start to placeable, kill -9 to routed around / gone, req/s 1 vs 2"},
    {"cache", run_cache_bench, "embedding cache: TTFT with 50% repeated images, cache off vs on"},
    {"prefix", run_prefix_bench,
     "multi-turn chat: prefix caches off vs on, 2 prefills least-loaded vs cache-aware; TTFT by turn, KV "
     "bytes"},
    {"soak", run_soak_bench, "many small requests in blocks: RSS of every role per block and its growth"},
    {"serve", run_serve_bench,
     "OpenAI-API load at a Poisson rate: TTFT/ITL/E2E percentiles, throughput, errors"},
    {"vision", run_vision_bench, "mmproj towers: encode ms/image and TTFT vs llama.cpp, encoder RSS vs LM"},
    {"grammar", run_grammar_bench,
     "constrained decoding: the grammar mask's and accept's cost per token on vocabularies of 0.5k-152k"},
    {"vqa", run_vqa_bench,
     "the demo model's accuracy per question type: cluster, colocated, llama.cpp; agreement, images/s, TTFT"},
};

int usage(FILE* out) {
  std::fprintf(out, "usage: epd-bench <subcommand> [--help]\n\nsubcommands:\n");
  for (const auto& s : kSubcommands) std::fprintf(out, "  %-10s %s\n", s.name, s.help);
  std::fprintf(
      out,
      "\n--plot DIR (transfer, serve, e2e with --staged-config, soak) writes PNG plots with gnuplot\n"
      "(Debian package gnuplot-nox) into DIR, next to their data files and gnuplot scripts.\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(stderr);
  if (!std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) return usage(stdout);
  for (const auto& s : kSubcommands)
    if (!std::strcmp(argv[1], s.name)) return s.run(argc - 1, argv + 1);  // argv[0] becomes the subcommand
  std::fprintf(stderr, "epd-bench: unknown subcommand '%s'\n", argv[1]);
  return usage(stderr);
}

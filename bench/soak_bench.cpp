#include "soak_bench.hpp"

#include <httplib.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "cluster.hpp"
#include "plot.hpp"
#include "plot_kinds.hpp"
#include "process_stats.hpp"

namespace epd::bench {
namespace {

using nlohmann::json;

struct Process {
  std::string id;  // the instance id from its --id argument
  pid_t pid = 0;
};

// The role processes epd-cluster started, named by their --id argument.
std::vector<Process> role_processes(pid_t cluster) {
  std::vector<Process> out;
  for (pid_t pid : child_pids(cluster)) {
    std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline");
    std::vector<std::string> args;
    for (std::string a; std::getline(f, a, '\0');) args.push_back(a);
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--id") out.push_back({args[i + 1], pid});
  }
  return out;
}

struct Block {
  size_t failed = 0;
  double wall_s = 0;
};

// Sends `n` requests, `concurrency` at a time over keep-alive connections.
Block run_block(const std::string& host, int port, int n, int concurrency, const std::string& body) {
  std::atomic<int> next{0};
  std::atomic<size_t> failed{0};
  std::once_flag first_failure;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t)
    threads.emplace_back([&] {
      httplib::Client c(host, port);
      c.set_read_timeout(120, 0);
      while (next++ < n) {
        auto r = c.Post("/v1/generate", body, "application/json");
        if (r && r->status == 200) continue;
        ++failed;
        std::call_once(first_failure, [&] {
          std::fprintf(stderr, "  first failure: %s\n",
                       r ? (std::to_string(r->status) + " " + r->body).c_str()
                         : httplib::to_string(r.error()).c_str());
        });
      }
    });
  for (auto& t : threads) t.join();
  return {failed.load(), std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

}  // namespace

int run_soak(int argc, char** argv) {
  CLI::App app{"epd-bench soak: RSS of every role process per block of requests, and its growth"};
  std::string config = "configs/local.toml";
  int requests = 50000, blocks = 10, concurrency = 8, prompt_bytes = 20;
  uint32_t max_tokens = 4;
  std::string plot_dir;
  app.add_option("--config", config, "cluster config; the cluster is started from it");
  app.add_option("--requests", requests, "requests in all")->check(CLI::PositiveNumber);
  app.add_option("--blocks", blocks, "blocks the requests are split into (RSS is read after each)")
      ->check(CLI::Range(2, 1000));
  app.add_option("--concurrency", concurrency, "requests in flight")->check(CLI::PositiveNumber);
  app.add_option("--prompt-bytes", prompt_bytes, "prompt length in bytes")->check(CLI::PositiveNumber);
  app.add_option("--max-tokens", max_tokens, "tokens generated per request")->check(CLI::PositiveNumber);
  app.add_option("--plot", plot_dir,
                 "write DIR/soak-rss.png (gnuplot): every role's RSS per block and its change")
      ->type_name("DIR");
  CLI11_PARSE(app, argc, argv);
  if (!plot_dir.empty())
    if (auto e = prepare_plot_dir(plot_dir); !e.empty()) {
      std::fprintf(stderr, "epd-bench soak: --plot: %s\n", e.c_str());
      return 2;
    }

  auto cfg = config::load_cluster_config(config);
  if (!cfg) {
    std::fprintf(stderr, "%s\n", cfg.error().detail.c_str());
    return 2;
  }
  const auto [host, port] = router_address(*cfg);
  auto cluster = start_cluster(config, host, port, cfg->instances.size());
  if (!cluster) return 1;
  const auto procs = role_processes(cluster->status("epd-cluster")->pid);
  std::string prompt;
  for (int k = 0; k < prompt_bytes; ++k) prompt.push_back(char('a' + (k * 7) % 26));
  const std::string body = json{{"prompt", prompt}, {"max_tokens", max_tokens}}.dump();

  std::printf("epd-bench soak: %s, %d requests in %d blocks, %d in flight, %d-byte prompts, max_tokens %u\n",
              config.c_str(), requests, blocks, concurrency, prompt_bytes, max_tokens);
  std::printf("%5s %9s %7s %9s", "block", "requests", "failed", "req/s");
  for (const auto& p : procs) std::printf(" %12s", (p.id + " MB").c_str());
  std::printf("\n");
  std::vector<std::vector<double>> rss(procs.size());
  size_t failed = 0;
  for (int b = 0; b < blocks; ++b) {
    const int n = requests / blocks + (b < requests % blocks ? 1 : 0);
    const Block r = run_block(host, port, n, concurrency, body);
    failed += r.failed;
    std::printf("%5d %9d %7zu %9.1f", b + 1, n, r.failed, double(n) / r.wall_s);
    for (size_t i = 0; i < procs.size(); ++i) {
      rss[i].push_back(status_mib(procs[i].pid, "VmRSS"));
      std::printf(" %12.1f", rss[i].back());
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  std::printf("RSS growth, block 2 -> block %d:", blocks);
  for (size_t i = 0; i < procs.size(); ++i)
    std::printf(" %s %+.2f %%%s", procs[i].id.c_str(), 100.0 * (rss[i].back() / rss[i][1] - 1),
                i + 1 < procs.size() ? "," : "\n");
  if (auto s = httplib::Client(host, port).Get("/v1/stats"); s && s->status == 200) {
    auto j = json::parse(s->body, nullptr, false);
    if (j.contains("tables")) std::printf("router tables after the run: %s\n", j["tables"].dump().c_str());
  }
  cluster->stop();
  if (!plot_dir.empty()) {
    std::vector<std::string> ids;
    for (const auto& p : procs) ids.push_back(p.id);
    char subtitle[256];
    std::snprintf(subtitle, sizeof subtitle,
                  "%s: %d requests in %d blocks, %d in flight, %d-byte prompts, max_tokens %u",
                  config.c_str(), requests, blocks, concurrency, prompt_bytes, max_tokens);
    const auto plot = soak_rss_plot(ids, rss, subtitle);
    if (auto e = render_plot(plot_dir, plot); !e.empty()) {
      std::fprintf(stderr, "epd-bench soak: --plot: %s\n", e.c_str());
      return 1;
    }
    std::printf("plot: %s\n", (std::filesystem::path(plot_dir) / plot.png_file()).c_str());
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace epd::bench

int run_soak_bench(int argc, char** argv) {
  return epd::bench::run_soak(argc, argv);
}

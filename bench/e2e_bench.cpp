#include "e2e_bench.hpp"

#include <httplib.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "cluster.hpp"
#include "control_plane_bench.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/config/cluster_config.hpp"
#include "epd/http/base64.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/image.hpp"
#include "plot.hpp"
#include "plot_kinds.hpp"
#include "ring_sampler.hpp"
#include "stats.hpp"

namespace epd::bench {
namespace {

using clock = std::chrono::steady_clock;
using nlohmann::json;

struct Workload {
  std::string prompt;
  std::optional<model::Image> image;
};

struct Sample {
  double ttft_ms = 0, tpot_ms = 0, total_ms = 0;
  size_t tokens = 0;
  bool ok = false;
};

std::vector<Workload> make_workload(int n, int prompt_bytes, bool images, uint32_t image_side) {
  std::vector<Workload> out;
  for (int i = 0; i < n; ++i) {
    Workload w;
    for (int k = 0; k < prompt_bytes; ++k) w.prompt.push_back(char('a' + (i * 7 + k * 3) % 26));
    if (images && i % 2 == 0) w.image = model::make_test_image(image_side, image_side, uint64_t(i));
    out.push_back(std::move(w));
  }
  return out;
}

void progress(const char* what, size_t done, size_t total) {
  const int width = 30;
  const int filled = total ? int(width * done / total) : width;
  std::fprintf(stderr, "\r  %-12s [%s%s] %zu/%zu", what, std::string(size_t(filled), '#').c_str(),
               std::string(size_t(width - filled), '.').c_str(), done, total);
  if (done == total) std::fprintf(stderr, "\n");
}

// Sends every request, at most `concurrency` in flight, starting them `interval` apart (0 = back to back).
std::vector<Sample> run_disaggregated(const std::string& host, int port, const std::vector<Workload>& work,
                                      uint32_t max_tokens, int concurrency,
                                      std::chrono::microseconds interval, double& wall_s) {
  std::vector<Sample> samples(work.size());
  std::atomic<size_t> next{0}, done{0};
  std::mutex print_mu;
  const auto t0 = clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t)
    threads.emplace_back([&] {
      httplib::Client c(host, port);
      c.set_read_timeout(120, 0);
      for (size_t i = next++; i < work.size(); i = next++) {
        if (interval.count() > 0) std::this_thread::sleep_until(t0 + interval * i);
        json req{{"prompt", work[i].prompt}, {"max_tokens", max_tokens}};
        if (work[i].image) req["image"] = http::base64_encode(model::encode_ppm(*work[i].image));
        const auto start = clock::now();
        auto r = c.Post("/v1/generate", req.dump(), "application/json");
        Sample s;
        s.total_ms = std::chrono::duration<double, std::milli>(clock::now() - start).count();
        if (r && r->status == 200) {
          auto j = json::parse(r->body, nullptr, false);
          s.ok = true;
          s.tokens = j["tokens"].size();
          s.ttft_ms = j["timings_ms"]["first_token"].get<double>();
          s.tpot_ms = s.tokens > 1 ? (s.total_ms - s.ttft_ms) / double(s.tokens - 1) : 0;
        }
        samples[i] = s;
        std::lock_guard lock(print_mu);
        progress("requests", ++done, work.size());
      }
    });
  for (auto& t : threads) t.join();
  wall_s = std::chrono::duration<double>(clock::now() - t0).count();
  return samples;
}

std::vector<Sample> run_colocated(const model::ModelConfig& cfg, const std::vector<Workload>& work,
                                  uint32_t max_tokens) {
  auto runner = model::make_reference_runner(cfg);
  std::vector<Sample> samples;
  model::GenerateOptions opts;
  opts.max_tokens = max_tokens;
  opts.chunk = 64;  // the prefill role's default chunk size
  for (size_t i = 0; i < work.size(); ++i) {
    auto r = model::generate(**runner, work[i].prompt, work[i].image ? &*work[i].image : nullptr, opts);
    Sample s;
    if (r) {
      s.ok = true;
      s.tokens = r->tokens.size();
      s.ttft_ms = r->encode_ms + r->prefill_ms;
      s.tpot_ms = s.tokens > 1 ? r->decode_ms / double(s.tokens - 1) : 0;
      s.total_ms = r->encode_ms + r->prefill_ms + r->decode_ms;
    }
    samples.push_back(s);
    progress("colocated", i + 1, work.size());
  }
  return samples;
}

void row(const char* name, const std::vector<Sample>& s, double Sample::*field) {
  std::vector<double> v;
  for (const auto& x : s)
    if (x.ok) v.push_back(x.*field);
  std::printf("  %-22s p50 %9.2f ms   p99 %9.2f ms\n", name, percentile(v, 50), percentile(v, 99));
}

double p50(const std::vector<Sample>& s, double Sample::*field) {
  std::vector<double> v;
  for (const auto& x : s)
    if (x.ok) v.push_back(x.*field);
  return percentile(v, 50);
}

struct Measured {
  std::vector<Sample> seq, tput;
  double tput_wall = 0;
  size_t failed = 0, tokens = 0;
  std::vector<RingSample> occupancy;
};

struct RunOptions {
  int concurrency = 4;
  std::chrono::microseconds interval{0};
  uint32_t max_tokens = 32;
  bool start = true;
};

// One request at a time, then the throughput run, against the cluster of `config`.
std::optional<Measured> measure(const std::string& config, const std::vector<Workload>& work,
                                const RunOptions& o) {
  auto cfg = config::load_cluster_config(config);
  if (!cfg) {
    std::fprintf(stderr, "%s\n", cfg.error().detail.c_str());
    return std::nullopt;
  }
  const auto [host, port] = router_address(*cfg);
  std::unique_ptr<launcher::ProcessGroup> cluster;
  if (o.start) {
    cluster = start_cluster(config, host, port, cfg->instances.size());
    if (!cluster) return std::nullopt;
  }
  Measured m;
  double wall = 0;
  m.seq = run_disaggregated(host, port, work, o.max_tokens, 1, {}, wall);
  RingSampler sampler(host, port);
  m.tput = run_disaggregated(host, port, work, o.max_tokens, o.concurrency, o.interval, m.tput_wall);
  sampler.stop();
  m.occupancy = sampler.samples();
  for (const auto& s : m.tput) {
    m.failed += !s.ok;
    m.tokens += s.tokens;
  }
  for (const auto& s : m.seq) m.failed += !s.ok;
  if (cluster) cluster->stop();
  return m;
}

void print_throughput(const Measured& m, int requests) {
  row("TTFT", m.tput, &Sample::ttft_ms);
  row("TPOT", m.tput, &Sample::tpot_ms);
  row("end to end", m.tput, &Sample::total_ms);
  std::printf("  %.2f requests/s, %.1f tokens/s, %zu failed\n", double(requests) / m.tput_wall,
              double(m.tokens) / m.tput_wall, m.failed);
}

// The ring's occupancy during the throughput run: a coarse timeline (one line per tenth of the run).
void print_occupancy(const std::vector<RingSample>& pts) {
  if (pts.empty() || pts.back().ring == 0) {
    std::printf("  (no staging ring reported)\n");
    return;
  }
  const size_t buckets = std::min<size_t>(10, pts.size());
  uint64_t peak = 0;
  for (const auto& p : pts) peak = std::max(peak, p.peak);
  std::printf(
      "  ring %.1f MiB, peak use %.1f%% (over-subscription > 100%%: grants waiting for the watermark)\n",
      double(pts.back().ring) / (1 << 20), 100.0 * double(peak) / double(pts.back().ring));
  for (size_t b = 0; b < buckets; ++b) {
    const size_t lo = b * pts.size() / buckets, hi = (b + 1) * pts.size() / buckets;
    uint64_t mx = 0;
    double sum = 0;
    for (size_t i = lo; i < hi; ++i) {
      mx = std::max(mx, pts[i].peak);
      sum += double(pts[i].peak);
    }
    const double mean_pct = 100.0 * sum / double(hi - lo) / double(pts.back().ring);
    const double max_pct = 100.0 * double(mx) / double(pts.back().ring);
    std::printf("  t=%7.0f ms  mean %5.1f%%  max %5.1f%%  |%s\n", pts[lo].t_ms, mean_pct, max_pct,
                std::string(size_t(std::min(100.0, mean_pct) / 2.5), '#').c_str());
  }
}

}  // namespace

int run_e2e(int argc, char** argv) {
  CLI::App app{"epd-bench e2e: disaggregated TTFT/TPOT/throughput vs the same workload colocated"};
  std::string config = "configs/bench-local.toml", staged_config, plot_dir;
  bool quick = false, images = true, control_plane = true;
  int requests = 24, prompt_bytes = 480;
  double rate = 0;
  RunOptions o;
  app.add_option("--config", config, "cluster config: its router is used, and its model runs colocated");
  app.add_option(
      "--staged-config", staged_config,
      "a second cluster whose decode uses another KV layout (e.g. configs/bench-staged.toml): the "
      "same workload runs on it, staged vs direct ratios and the staging ring's occupancy are printed");
  app.add_flag("!--no-start", o.start, "use already running clusters instead of starting them");
  app.add_option("--requests", requests, "requests in the throughput run");
  app.add_option("--concurrency", o.concurrency, "requests in flight in the throughput run");
  app.add_option("--rate", rate,
                 "requests per second in the throughput run (0 = as fast as concurrency allows)");
  app.add_option("--prompt-bytes", prompt_bytes, "prompt length in bytes (= tokens)");
  app.add_option("--max-tokens", o.max_tokens, "tokens generated per request");
  app.add_flag("!--no-images", images, "text only (default: every other request has an image)");
  app.add_flag("!--no-control-plane", control_plane, "skip the control-plane micro-benchmark");
  app.add_flag("--quick", quick, "a few seconds: 6 requests, short prompts");
  app.add_option("--plot", plot_dir,
                 "write DIR/staging-ring.png (gnuplot): the staging ring's occupancy over the staged "
                 "throughput run (needs --staged-config)")
      ->type_name("DIR");
  CLI11_PARSE(app, argc, argv);
  if (!plot_dir.empty()) {
    if (staged_config.empty()) {
      std::fprintf(stderr,
                   "epd-bench e2e: --plot draws the staging ring's occupancy; give --staged-config\n");
      return 2;
    }
    if (auto e = prepare_plot_dir(plot_dir); !e.empty()) {
      std::fprintf(stderr, "epd-bench e2e: --plot: %s\n", e.c_str());
      return 2;
    }
  }
  if (quick) {
    requests = 6;
    prompt_bytes = std::min(prompt_bytes, 200);
    o.max_tokens = std::min<uint32_t>(o.max_tokens, 8);
  }
  o.interval = rate > 0 ? std::chrono::microseconds(int64_t(1e6 / rate)) : std::chrono::microseconds(0);

  auto loaded = load_bench_config(config);
  if (!loaded) return 2;
  const auto* model_cfg = &loaded->model;
  const uint32_t side = model_cfg->patch_size * 8;  // 64 patches
  const auto work = make_workload(requests, prompt_bytes, images, side);
  std::printf("epd-bench e2e: model '%s', %d requests, prompt %d tokens%s, %u generated tokens\n",
              model_cfg->name.c_str(), requests, prompt_bytes,
              images ? " (+64 image patches every other)" : "", o.max_tokens);

  // Overhead: one request at a time, so queueing does not count against either side.
  auto direct = measure(config, work, o);
  if (!direct) return 1;
  auto colo = run_colocated(*model_cfg, work, o.max_tokens);
  std::optional<Measured> staged;
  if (!staged_config.empty()) {
    staged = measure(staged_config, work, o);
    if (!staged) return 1;
  }

  std::printf("\none request at a time (disaggregated over the cluster vs colocated in this process):\n");
  row("TTFT disaggregated", direct->seq, &Sample::ttft_ms);
  row("TTFT colocated", colo, &Sample::ttft_ms);
  row("TPOT disaggregated", direct->seq, &Sample::tpot_ms);
  row("TPOT colocated", colo, &Sample::tpot_ms);
  const double ttft_ratio = p50(direct->seq, &Sample::ttft_ms) / std::max(1e-9, p50(colo, &Sample::ttft_ms));
  std::printf("  TTFT overhead p50: %.2fx colocated (goal <= 1.10x on the bench preset over shm)\n",
              ttft_ratio);
  std::printf("\nthroughput, %d in flight%s:\n", o.concurrency, rate > 0 ? " at the given rate" : "");
  print_throughput(*direct, requests);
  size_t failed = direct->failed;
  if (staged) {
    failed += staged->failed;
    std::printf("\nstaged path (%s: decode in another KV layout) vs direct, same workload:\n",
                staged_config.c_str());
    row("TTFT staged, 1 at a time", staged->seq, &Sample::ttft_ms);
    row("TTFT direct, 1 at a time", direct->seq, &Sample::ttft_ms);
    const double seq_ratio =
        p50(staged->seq, &Sample::ttft_ms) / std::max(1e-9, p50(direct->seq, &Sample::ttft_ms));
    std::printf("  TTFT p50 staged / direct: %.2fx\n", seq_ratio);
    std::printf("  throughput run, staged:\n");
    print_throughput(*staged, requests);
    const double tput_ratio = direct->tput_wall / std::max(1e-9, staged->tput_wall);
    const double ttft_tput_ratio =
        p50(staged->tput, &Sample::ttft_ms) / std::max(1e-9, p50(direct->tput, &Sample::ttft_ms));
    std::printf("  requests/s staged / direct: %.2fx; TTFT p50 under load staged / direct: %.2fx\n",
                tput_ratio, ttft_tput_ratio);
    std::printf(
        "\nstaging ring occupancy during the staged throughput run (decode's highest use per heartbeat):\n");
    print_occupancy(staged->occupancy);
    if (!plot_dir.empty()) {
      char subtitle[256];
      std::snprintf(subtitle, sizeof subtitle,
                    "%s: %d requests, %d in flight, %d-token prompts, %u tokens each; decodes summed, "
                    "sampled every 50 ms",
                    staged_config.c_str(), requests, o.concurrency, prompt_bytes, o.max_tokens);
      const auto plot = ring_occupancy_plot(staged->occupancy, subtitle);
      if (auto e = render_plot(plot_dir, plot); !e.empty()) {
        std::fprintf(stderr, "epd-bench e2e: --plot: %s\n", e.c_str());
        return 1;
      }
      std::printf("  plot: %s\n", (std::filesystem::path(plot_dir) / plot.png_file()).c_str());
    }
  }
  if (control_plane) {
    std::printf("\n");
    if (int rc = run_control_plane_bench(quick); rc != 0) return rc;
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace epd::bench

int run_e2e_bench(int argc, char** argv) {
  return epd::bench::run_e2e(argc, argv);
}

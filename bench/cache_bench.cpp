#include "cache_bench.hpp"

#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "cluster.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/config/cluster_config.hpp"
#include "epd/http/base64.hpp"
#include "epd/launcher/free_port.hpp"
#include "epd/model/config.hpp"
#include "epd/model/image.hpp"
#include "stats.hpp"

namespace epd::bench {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct Request {
  std::string prompt;
  model::Image image;
  bool repeated = false;  // its image was sent before in the run
};

struct Answer {
  bool ok = false;
  double ttft_ms = 0;
  double encode_ms = 0;  // as the encoder reported it (0 when prefill held the embeddings)
  std::vector<uint32_t> tokens;
};

// Every request has an image; every odd one repeats the image of the request before it (with another
// prompt), so half the requests carry an image seen before and first-seen and repeated requests alternate:
// load on the machine that drifts during a run touches both kinds alike.
std::vector<Request> make_requests(int n, int prompt_bytes, uint32_t side) {
  std::vector<Request> out;
  for (int i = 0; i < n; ++i) {
    Request r;
    for (int k = 0; k < prompt_bytes; ++k) r.prompt.push_back(char('a' + (i * 7 + k * 3) % 26));
    r.image = model::make_test_image(side, side, uint64_t(i / 2));
    r.repeated = i % 2 == 1;
    out.push_back(std::move(r));
  }
  return out;
}

uint16_t free_port() {
  return uint16_t(launcher::free_port());
}

// The config with the embedding caches of every encoder and prefill set to `cache_bytes`, and a metrics
// address for those that have none (their cache counters are read after the run), written into `dir`.
std::optional<std::string> variant_config(const std::string& config, uint64_t cache_bytes,
                                          const fs::path& dir, const std::string& name) {
  auto parsed = read_config_toml(config);
  if (!parsed) return std::nullopt;
  toml::table& t = *parsed;
  for (const char* role : {"encoder", "prefill"})
    role_defaults(t, role).insert_or_assign("embedding_cache_bytes", int64_t(cache_bytes));
  if (auto* instances = t["instance"].as_array())
    for (auto& node : *instances) {
      auto* inst = node.as_table();
      const auto role = inst ? (*inst)["role"].value_or(std::string()) : std::string();
      if (role != "encoder" && role != "prefill") continue;
      inst->erase("embedding_cache_bytes");  // an instance's own key would override the defaults
      if (!inst->contains("metrics"))
        inst->insert_or_assign("metrics", "127.0.0.1:" + std::to_string(free_port()));
    }
  return write_config_toml(t, dir, name);
}

struct Run {
  std::vector<Answer> answers;
  double encoder_hits = 0, prefill_hits = 0, skipped = 0, encoder_misses = 0;
};

std::optional<Run> run_cluster(const std::string& config, const std::vector<Request>& work,
                               uint32_t max_tokens, const char* label) {
  auto cfg = config::load_cluster_config(config);
  if (!cfg) {
    std::fprintf(stderr, "%s\n", cfg.error().detail.c_str());
    return std::nullopt;
  }
  const auto [host, port] = router_address(*cfg);
  auto cluster = start_cluster(config, host, port, cfg->instances.size());
  if (!cluster) return std::nullopt;
  Run run;
  httplib::Client c(host, port);
  c.set_read_timeout(120, 0);
  for (size_t i = 0; i < work.size(); ++i) {
    json req{{"prompt", work[i].prompt}, {"max_tokens", max_tokens}};
    req["image"] = http::base64_encode(model::encode_ppm(work[i].image));
    Answer a;
    if (auto r = c.Post("/v1/generate", req.dump(), "application/json"); r && r->status == 200) {
      auto j = json::parse(r->body, nullptr, false);
      a.ok = true;
      a.ttft_ms = j["timings_ms"]["first_token"].get<double>();
      a.encode_ms = j["timings_ms"]["encode"].get<double>();
      a.tokens = j["tokens"].get<std::vector<uint32_t>>();
    }
    run.answers.push_back(std::move(a));
    std::fprintf(stderr, "\r  cache %-4s %zu/%zu", label, i + 1, work.size());
  }
  std::fprintf(stderr, "\n");
  run.encoder_hits = metric_total(*cfg, "encoder", "epd_embedding_cache_hits_total");
  run.encoder_misses = metric_total(*cfg, "encoder", "epd_embedding_cache_misses_total");
  run.prefill_hits = metric_total(*cfg, "prefill", "epd_embedding_cache_hits_total");
  run.skipped = metric_total(*cfg, "encoder", "epd_embedding_transfers_skipped_total");
  cluster->stop();
  return run;
}

// p50 of `field` over the answers whose request matches `pick`.
template <class Pick>
double p50_of(const Run& run, const std::vector<Request>& work, Pick pick, double Answer::*field) {
  std::vector<double> v;
  for (size_t i = 0; i < work.size(); ++i)
    if (run.answers[i].ok && pick(work[i])) v.push_back(run.answers[i].*field);
  return percentile(v, 50);
}
template <class Pick>
double ttft_p50(const Run& run, const std::vector<Request>& work, Pick pick) {
  return p50_of(run, work, pick, &Answer::ttft_ms);
}

}  // namespace

int run_cache(int argc, char** argv) {
  CLI::App app{"epd-bench cache: TTFT with 50% repeated images, embedding cache off vs on, same run"};
  std::string config = "configs/bench-local.toml";
  int requests = 32, prompt_bytes = 64, rounds = 1;
  uint32_t max_tokens = 4;
  uint64_t cache_bytes = uint64_t{64} << 20;
  uint32_t side = 0;
  app.add_option("--config", config, "cluster config (started twice: caches off, then on)");
  app.add_option("--requests", requests, "requests per run (every one with an image; half repeat one)");
  app.add_option("--prompt-bytes", prompt_bytes, "text bytes per prompt besides the image");
  app.add_option("--max-tokens", max_tokens, "tokens generated per request");
  app.add_option("--cache-bytes", cache_bytes, "embedding_cache_bytes of encoders and prefills when on");
  app.add_option("--rounds", rounds, "off/on pairs to run (the p50s are over all rounds)");
  app.add_option("--image-side", side,
                 "image width and height in pixels (default: 8 patches, as epd-bench e2e)");
  CLI11_PARSE(app, argc, argv);
  if (requests < 2 || rounds < 1 || cache_bytes == 0) {
    std::fprintf(stderr, "epd-bench cache: needs --requests >= 2, --rounds >= 1, --cache-bytes > 0\n");
    return 2;
  }
  auto loaded = load_bench_config(config);
  if (!loaded) return 2;
  const auto* model_cfg = &loaded->model;
  if (side == 0) side = model_cfg->patch_size * 8;  // 64 patches
  const auto work = make_requests(requests, prompt_bytes, side);
  const fs::path dir = fs::temp_directory_path() / ("epd-bench-cache-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto off_cfg = variant_config(config, 0, dir, "cache-off");
  const auto on_cfg = variant_config(config, cache_bytes, dir, "cache-on");
  if (!off_cfg || !on_cfg) return 2;
  std::printf(
      "epd-bench cache: model '%s', %d requests per run, each with a %ux%u image (%d distinct: every other "
      "request repeats the one before), prompt %d bytes, %u tokens, one request at a time, %d round(s)\n",
      model_cfg->name.c_str(), requests, side, side, (requests + 1) / 2, prompt_bytes, max_tokens, rounds);

  Run off, on;
  for (int round = 0; round < rounds; ++round) {
    auto a = run_cluster(*off_cfg, work, max_tokens, "off");
    auto b = run_cluster(*on_cfg, work, max_tokens, "on");
    if (!a || !b) return 1;
    // Tokens are compared request by request within each round.
    size_t failed = 0, differ = 0;
    for (size_t i = 0; i < work.size(); ++i) {
      failed += !a->answers[i].ok + !b->answers[i].ok;
      differ += a->answers[i].ok && b->answers[i].ok && a->answers[i].tokens != b->answers[i].tokens;
    }
    std::printf("  round %d: %zu failed, %zu of %zu answers differ between cache off and on\n", round + 1,
                failed, differ, work.size());
    if (failed || differ) return 1;
    off.answers.insert(off.answers.end(), a->answers.begin(), a->answers.end());
    on.answers.insert(on.answers.end(), b->answers.begin(), b->answers.end());
    on.encoder_hits += b->encoder_hits;
    on.encoder_misses += b->encoder_misses;
    on.prefill_hits += b->prefill_hits;
    on.skipped += b->skipped;
    off.encoder_hits += a->encoder_hits;
    off.prefill_hits += a->prefill_hits;
  }
  fs::remove_all(dir);
  std::vector<Request> all;
  for (int round = 0; round < rounds; ++round) all.insert(all.end(), work.begin(), work.end());
  const auto any = [](const Request&) { return true; };
  const auto repeated = [](const Request& r) { return r.repeated; };
  const auto first = [](const Request& r) { return !r.repeated; };
  std::printf("\nTTFT p50 (ms)            cache off   cache on   on/off\n");
  const std::pair<const char*, std::function<bool(const Request&)>> rows[] = {
      {"all requests", any}, {"repeated images", repeated}, {"first-seen images", first}};
  for (const auto& [name, pick] : rows) {
    const double a = ttft_p50(off, all, pick), b = ttft_p50(on, all, pick);
    std::printf("  %-20s %11.2f %10.2f   %5.2fx\n", name, a, b, b / std::max(1e-9, a));
  }
  std::printf(
      "  (encode stage p50, first-seen images: %.2f ms off, %.2f ms on; repeated: %.2f ms off, %.2f ms on)\n",
      p50_of(off, all, first, &Answer::encode_ms), p50_of(on, all, first, &Answer::encode_ms),
      p50_of(off, all, repeated, &Answer::encode_ms), p50_of(on, all, repeated, &Answer::encode_ms));
  std::printf("  repeated / first-seen within a run: cache off %.2fx, cache on %.2fx\n",
              ttft_p50(off, all, repeated) / std::max(1e-9, ttft_p50(off, all, first)),
              ttft_p50(on, all, repeated) / std::max(1e-9, ttft_p50(on, all, first)));
  std::printf(
      "\ncache on: encoder hits %.0f, misses %.0f; prefill hits %.0f; embedding transfers skipped %.0f\n"
      "cache off: encoder hits %.0f, prefill hits %.0f; tokens identical in every request\n",
      on.encoder_hits, on.encoder_misses, on.prefill_hits, on.skipped, off.encoder_hits, off.prefill_hits);
  return 0;
}

}  // namespace epd::bench

int run_cache_bench(int argc, char** argv) {
  return epd::bench::run_cache(argc, argv);
}

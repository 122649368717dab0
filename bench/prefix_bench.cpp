#include "prefix_bench.hpp"

#include <httplib.h>
#include <unistd.h>

#include <toml++/toml.h>
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include "cluster.hpp"
#include "epd/actors/role_support.hpp"
#include "epd/config/cluster_config.hpp"
#include "epd/launcher/free_port.hpp"
#include "epd/model/kv_cache.hpp"
#include "epd/model/kv_staging.hpp"
#include "stats.hpp"

namespace epd::bench {
// A named namespace, not an anonymous one: the bench compiles in unity batches, beside other benches'
// helpers of the same names.
namespace prefix_bench {

using nlohmann::json;
namespace fs = std::filesystem;

struct Shape {
  int conversations = 8;
  int turns = 6;
  int system_tokens = 1000;
  int user_tokens = 32;
  uint32_t max_tokens = 8;
  uint64_t seed = 1;
};

// One variant of the cluster: how many prefills, caches on or off, placement, and membership in etcd with
// two routers that a conversation's turns alternate between (each router knows only its own placements).
struct Variant {
  const char* name;
  int prefills;
  bool caches;
  bool cache_aware;
  bool two_routers = false;
};

struct Turn {
  bool ok = false;
  double ttft_ms = 0;
  std::vector<uint32_t> prompt, answer;
  std::string prefill;
};

struct Outcome {
  std::vector<std::vector<Turn>> turns;  // [conversation][turn]
  double prefill_hits = 0, prefill_misses = 0, decode_hits = 0, kv_bytes = 0, not_sent = 0;
  double seconds = 0;
};

// Printable bytes: the reference models' vocabulary is bytes (and three specials above 255).
std::vector<uint32_t> random_tokens(std::mt19937_64& rng, int n) {
  std::vector<uint32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(uint32_t(32 + rng() % 95));
  return out;
}

// The config with the variant's settings, free ports for every instance, a metrics address for every
// prefill and decode (their counters are read after the run), and a second prefill (and router) when
// asked, written into `dir`.
std::optional<std::string> variant_config(const std::string& config, const Variant& v, const fs::path& dir) {
  auto parsed = read_config_toml(config);
  if (!parsed) return std::nullopt;
  toml::table& t = *parsed;
  if (!v.caches)
    for (const char* role : {"prefill", "decode"})
      role_defaults(t, role).insert_or_assign("prefix_cache_pages", int64_t(0));
  if (!v.cache_aware) role_defaults(t, "router").insert_or_assign("prefix_index_blocks", int64_t(0));
  auto* instances = t["instance"].as_array();
  if (!instances) return std::nullopt;
  std::optional<toml::table> prefill;
  for (auto& node : *instances) {
    auto* inst = node.as_table();
    if (!inst) continue;
    // Ports of this run's own choosing: the config's fixed ones could be taken by anything else running.
    inst->insert_or_assign("control", "tcp://127.0.0.1:" + std::to_string(launcher::free_port()));
    if (inst->contains("http"))
      inst->insert_or_assign("http", "127.0.0.1:" + std::to_string(launcher::free_port()));
    const auto role = (*inst)["role"].value_or(std::string());
    if (role != "prefill" && role != "decode") continue;
    for (const char* key : {"prefix_cache_pages", "prefix_index_blocks"}) inst->erase(key);
    if (!inst->contains("metrics"))
      inst->insert_or_assign("metrics", "127.0.0.1:" + std::to_string(launcher::free_port()));
    if (role == "prefill" && !prefill) prefill = *inst;
  }
  if (v.prefills == 2 && prefill) {
    prefill->insert_or_assign("id", "prefill-extra");
    prefill->insert_or_assign("control", "tcp://127.0.0.1:" + std::to_string(launcher::free_port()));
    prefill->insert_or_assign("metrics", "127.0.0.1:" + std::to_string(launcher::free_port()));
    instances->push_back(std::move(*prefill));
  }
  if (v.two_routers) {  // membership in a local etcd that epd-cluster starts, and a second router
    auto& cluster = *t["cluster"].as_table();
    const auto client = std::to_string(launcher::free_port());
    cluster.insert_or_assign("registry", "etcd");
    cluster.insert_or_assign("etcd_endpoints", toml::array{"http://127.0.0.1:" + client});
    cluster.insert_or_assign("etcd_prefix", "/epd/bench-prefix/");
    cluster.insert_or_assign("etcd_lease_ttl_ms", int64_t(3000));
    t.insert_or_assign(
        "etcd", toml::table{{"local", true}, {"peer", "127.0.0.1:" + std::to_string(launcher::free_port())}});
    std::optional<toml::table> router;
    for (auto& node : *instances)
      if (auto* inst = node.as_table(); inst && (*inst)["role"].value_or(std::string()) == "router")
        router = *inst;
    if (!router) return std::nullopt;
    router->insert_or_assign("id", "router-extra");
    router->insert_or_assign("control", "tcp://127.0.0.1:" + std::to_string(launcher::free_port()));
    router->insert_or_assign("http", "127.0.0.1:" + std::to_string(launcher::free_port()));
    router->erase("metrics");
    instances->push_back(std::move(*router));
  }
  return write_config_toml(t, dir, v.name);
}

// Every conversation in its own thread, turn after turn; a turn's prompt is the conversation so far (the
// answers included, as a chat client resends them) plus new user tokens.
std::optional<Outcome> run_variant(const std::string& config, const Shape& shape, const char* label) {
  auto cfg = config::load_cluster_config(config);
  if (!cfg) {
    std::fprintf(stderr, "%s\n", cfg.error().detail.c_str());
    return std::nullopt;
  }
  const auto [host, port] = router_address(*cfg);
  auto cluster = start_cluster(config, host, port, cfg->instances.size());
  if (!cluster) return std::nullopt;
  std::vector<std::pair<std::string, int>> routers;  // a conversation's turns go round them
  for (const auto* r : cfg->with_role("router")) routers.push_back(http_address(*r));
  Outcome out;
  out.turns.assign(shape.conversations, {});
  std::mt19937_64 shared_rng(shape.seed);
  const auto system = random_tokens(shared_rng, shape.system_tokens);
  std::mutex mu;
  int done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < shape.conversations; ++c)
    threads.emplace_back([&, c] {
      std::mt19937_64 rng(shape.seed * 1000 + uint64_t(c));
      std::vector<uint32_t> history = system;
      std::vector<std::unique_ptr<httplib::Client>> clients;
      for (const auto& [h, p] : routers) {
        clients.push_back(std::make_unique<httplib::Client>(h, p));
        clients.back()->set_read_timeout(300, 0);
      }
      for (int t = 0; t < shape.turns; ++t) {
        auto& http = *clients[size_t(c + t) % clients.size()];
        auto user = random_tokens(rng, shape.user_tokens);
        history.insert(history.end(), user.begin(), user.end());
        Turn turn;
        turn.prompt = history;
        json req{{"prompt_tokens", history}, {"max_tokens", shape.max_tokens}};
        if (auto r = http.Post("/v1/generate", req.dump(), "application/json"); r && r->status == 200) {
          auto j = json::parse(r->body, nullptr, false);
          turn.ok = true;
          turn.ttft_ms = j["timings_ms"]["first_token"].get<double>();
          turn.answer = j["tokens"].get<std::vector<uint32_t>>();
          turn.prefill = j["instances"]["prefill"].get<std::string>();
        }
        for (uint32_t tok : turn.answer) history.push_back(tok < 256 ? tok : 32);  // no special ids
        std::lock_guard lock(mu);
        out.turns[c].push_back(std::move(turn));
        std::fprintf(stderr, "\r  %-26s %d/%d", label, ++done, shape.conversations * shape.turns);
      }
    });
  for (auto& t : threads) t.join();
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\n");
  out.prefill_hits = metric_total(*cfg, "prefill", "epd_prefix_cache_hit_tokens_total");
  out.prefill_misses = metric_total(*cfg, "prefill", "epd_prefix_cache_missed_tokens_total");
  out.decode_hits = metric_total(*cfg, "decode", "epd_prefix_cache_hit_tokens_total");
  out.kv_bytes = metric_total(*cfg, "prefill", "epd_transfer_size_bytes_sum");
  out.not_sent = metric_total(*cfg, "prefill", "epd_prefix_cache_kv_bytes_not_sent_total");
  cluster->stop();
  return out;
}

std::vector<double> ttfts(const Outcome& o, bool first_turn) {
  std::vector<double> v;
  for (const auto& conv : o.turns)
    for (size_t t = 0; t < conv.size(); ++t)
      if (conv[t].ok && (t == 0) == first_turn) v.push_back(conv[t].ttft_ms);
  return v;
}

uint64_t prompt_tokens(const Outcome& o) {
  uint64_t n = 0;
  for (const auto& conv : o.turns)
    for (const auto& t : conv) n += t.prompt.size();
  return n;
}

// Of the turns after the first: on the prefill of the turn before.
double sticky(const Outcome& o) {
  int same = 0, later = 0;
  for (const auto& conv : o.turns)
    for (size_t t = 1; t < conv.size(); ++t, ++later) same += conv[t].prefill == conv[t - 1].prefill;
  return later ? double(same) / later : 0;
}

double ratio(double a, double b) {
  return a / std::max(1e-9, b);
}

}  // namespace prefix_bench

int run_prefix(int argc, char** argv) {
  using namespace prefix_bench;
  CLI::App app{"epd-bench prefix: multi-turn chat, prefix caches off vs on, 1 vs 2 prefills"};
  std::string config = "configs/bench-local.toml";
  Shape shape;
  app.add_option("--config", config, "cluster config with one prefill (started once per variant)");
  app.add_option("--conversations", shape.conversations, "conversations, all at once (one thread each)");
  app.add_option("--turns", shape.turns, "turns per conversation");
  app.add_option("--system-tokens", shape.system_tokens,
                 "tokens of the system prompt every conversation shares");
  app.add_option("--user-tokens", shape.user_tokens, "new user tokens per turn");
  app.add_option("--max-tokens", shape.max_tokens,
                 "tokens generated per turn (appended to the conversation)");
  app.add_option("--seed", shape.seed, "seeds the tokens");
  CLI11_PARSE(app, argc, argv);
  if (shape.conversations < 1 || shape.turns < 2 || shape.system_tokens < 0 || shape.user_tokens < 1) {
    std::fprintf(stderr, "epd-bench prefix: needs --conversations >= 1, --turns >= 2, --user-tokens >= 1\n");
    return 2;
  }
  auto loaded = load_bench_config(config);
  if (!loaded) return 2;
  const auto* model_cfg = &loaded->model;
  const uint64_t longest =
      uint64_t(shape.system_tokens) + uint64_t(shape.turns) * (shape.user_tokens + shape.max_tokens);
  if (longest >= model_cfg->max_seq) {
    std::fprintf(stderr, "epd-bench prefix: the last turn (%llu tokens) does not fit max_seq %u\n",
                 (unsigned long long)longest, model_cfg->max_seq);
    return 2;
  }
  const fs::path dir = fs::temp_directory_path() / ("epd-bench-prefix-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const Variant variants[] = {{"1 prefill, caches off", 1, false, false},
                              {"1 prefill, caches on", 1, true, true},
                              {"2 prefills, least-loaded", 2, true, false},
                              {"2 prefills, cache-aware", 2, true, true},
                              {"2 prefills, 2 routers (etcd)", 2, true, true, true}};
  std::printf(
      "epd-bench prefix: model '%s', %d conversations at once x %d turns, shared system prompt %d tokens, "
      "%d new user tokens and %u answer tokens per turn\n",
      model_cfg->name.c_str(), shape.conversations, shape.turns, shape.system_tokens, shape.user_tokens,
      shape.max_tokens);
  std::vector<Outcome> outcomes;
  for (const auto& v : variants) {
    auto path = variant_config(config, v, dir);
    if (!path) return 2;
    auto o = run_variant(*path, shape, v.name);
    if (!o) return 1;
    outcomes.push_back(std::move(*o));
  }
  fs::remove_all(dir);
  // Every variant must answer every turn with the same tokens (greedy; caches change no token).
  size_t failed = 0, differ = 0;
  for (const auto& o : outcomes)
    for (int c = 0; c < shape.conversations; ++c)
      for (int t = 0; t < shape.turns; ++t) {
        failed += !o.turns[c][t].ok;
        differ += o.turns[c][t].ok && outcomes[0].turns[c][t].ok &&
                  o.turns[c][t].answer != outcomes[0].turns[c][t].answer;
      }
  // The roles' default KV element type (kv_dtype = "f16"): the clusters here set none.
  const uint64_t kv_per_token =
      model::staging_token_bytes(model::kv_layout_for(*model_cfg, 1, model::DType::f16));
  std::printf("\n%-28s %9s %9s %9s %9s %10s %12s %9s %9s %7s\n", "variant", "t1 p50", "t1 p99", "t2+ p50",
              "t2+ p99", "computed", "KV MiB", "P hit", "D hit", "sticky");
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const auto& o = outcomes[i];
    const double all = double(prompt_tokens(o));
    const double computed = variants[i].caches ? o.prefill_misses : all;
    std::printf("%-28s %9.1f %9.1f %9.1f %9.1f %10.0f %12.2f %9.2f %9.2f %7.2f\n", variants[i].name,
                percentile(ttfts(o, true), 50), percentile(ttfts(o, true), 99),
                percentile(ttfts(o, false), 50), percentile(ttfts(o, false), 99), computed,
                o.kv_bytes / (1 << 20), o.prefill_hits / all, o.decode_hits / all,
                variants[i].prefills > 1 ? sticky(o) : 1.0);
  }
  const auto& off = outcomes[0];
  const auto& on = outcomes[1];
  // New tokens of a turn: the user's and the previous answer's (what no earlier prompt had).
  const double turns_after_first = double(shape.conversations) * (shape.turns - 1);
  double new_tokens = 0;
  for (const auto& conv : on.turns)
    for (size_t t = 1; t < conv.size(); ++t)
      new_tokens += double(conv[t].prompt.size() - conv[t - 1].prompt.size());
  double first_turn_bytes = 0;
  for (const auto& conv : on.turns) first_turn_bytes += double(conv[0].prompt.size()) * kv_per_token;
  const double later_bytes = on.kv_bytes - first_turn_bytes;  // prompt KV and aux records of turns >= 2
  std::printf(
      "\ncaches on vs off (1 prefill): TTFT p50 of turns >= 2 %.2fx (goal <= 0.25x), p99 %.2fx; turn 1 "
      "p50 %.2fx\n",
      ratio(percentile(ttfts(on, false), 50), percentile(ttfts(off, false), 50)),
      ratio(percentile(ttfts(on, false), 99), percentile(ttfts(off, false), 99)),
      ratio(percentile(ttfts(on, true), 50), percentile(ttfts(off, true), 50)));
  std::printf(
      "KV written per turn >= 2: %.0f bytes = %.2fx the KV of its new tokens (goal <= 1.1x); decode held "
      "%.1f MiB that was not sent\n",
      later_bytes / turns_after_first, ratio(later_bytes, new_tokens * kv_per_token),
      on.not_sent / (1 << 20));
  std::printf(
      "2 prefills: prefill hit ratio cache-aware %.2f, least-loaded %.2f, 1 prefill %.2f; "
      "cache-aware / 1 prefill %.2fx (goal >= 0.9x)\n",
      outcomes[3].prefill_hits / double(prompt_tokens(outcomes[3])),
      outcomes[2].prefill_hits / double(prompt_tokens(outcomes[2])),
      on.prefill_hits / double(prompt_tokens(on)),
      ratio(outcomes[3].prefill_hits / double(prompt_tokens(outcomes[3])),
            on.prefill_hits / double(prompt_tokens(on))));
  std::printf(
      "2 routers over etcd, turns alternating: prefill hit ratio %.2f, %.2fx the one-router "
      "cache-aware run; turns on the previous turn's prefill %.2f (one router %.2f)\n",
      outcomes[4].prefill_hits / double(prompt_tokens(outcomes[4])),
      ratio(outcomes[4].prefill_hits / double(prompt_tokens(outcomes[4])),
            outcomes[3].prefill_hits / double(prompt_tokens(outcomes[3]))),
      sticky(outcomes[4]), sticky(outcomes[3]));
  std::printf("%zu turns failed; %zu answers differ from the caches-off run\n", failed, differ);
  return failed || differ ? 1 : 0;
}

}  // namespace epd::bench

int run_prefix_bench(int argc, char** argv) {
  return epd::bench::run_prefix(argc, argv);
}

#include "serve_bench.hpp"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

#include "async_http.hpp"
#include "cluster.hpp"
#include "epd/config/cluster_config.hpp"
#include "llama_server.hpp"
#include "plot.hpp"
#include "plot_kinds.hpp"
#include "process_stats.hpp"
#include "serve_conversation.hpp"
#include "serve_runner.hpp"

namespace epd::bench {
namespace {

using nlohmann::json;

std::string base64(const std::string& in) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    const size_t n = std::min<size_t>(3, in.size() - i);
    uint32_t v = 0;
    for (size_t k = 0; k < 3; ++k) v = v << 8 | (k < n ? uint8_t(in[i + k]) : 0u);
    for (size_t k = 0; k < 4; ++k) out.push_back(k <= n ? kAlphabet[(v >> (18 - 6 * k)) & 63] : '=');
  }
  return out;
}

// A data URI for an image file; its type from the magic bytes (the router takes PNG, JPEG and PPM).
std::string image_data_uri(const std::string& path, std::string& error) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    error = "cannot read " + path;
    return "";
  }
  const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::string type = "application/octet-stream";
  if (bytes.rfind("\x89PNG", 0) == 0)
    type = "image/png";
  else if (bytes.rfind("\xff\xd8", 0) == 0)
    type = "image/jpeg";
  else if (bytes.rfind("P6", 0) == 0)
    type = "image/x-portable-pixmap";
  return "data:" + type + ";base64," + base64(bytes);
}

// The first model GET /v1/models lists; "" when it cannot be read.
std::string first_model(boost::asio::io_context& io, AsyncHttp& http, const std::string& prefix) {
  std::string body, model;
  unsigned status = 0;
  AsyncHttp::Handlers h;
  h.on_status = [&](unsigned s, std::string_view) { status = s; };
  h.on_body = [&](std::string_view b) { body.append(b); };
  h.on_done = [&](const std::string& err) {
    if (!err.empty() || status != 200) return;
    const auto j = json::parse(body, nullptr, false);
    if (j.is_object() && j.contains("data") && j["data"].is_array() && !j["data"].empty())
      model = j["data"][0].value("id", "");
  };
  http.request("GET", prefix + "/v1/models", "", {}, std::move(h));
  io.run();
  io.restart();
  return model;
}

void print_header(const std::string& url, const std::string& rate, const RunOptions& o,
                  const WorkloadOptions& w) {
  char amount[64], limit[32];
  if (o.requests)
    std::snprintf(amount, sizeof amount, "%zu requests", o.requests);
  else
    std::snprintf(amount, sizeof amount, "%g s of arrivals", o.seconds);
  std::snprintf(limit, sizeof limit, o.max_concurrency ? "%zu" : "unbounded", o.max_concurrency);
  std::printf("epd-bench serve: %s, %s, model %s, rate %s/s, %s, max concurrency %s, %s\n", url.c_str(),
              o.chat ? "chat" : "completions", w.model.c_str(), rate.c_str(), amount, limit,
              o.stream ? "streamed" : "not streamed");
  std::printf("  prompt %d chars ±%g%%, max_tokens %d ±%g%%, temperature %g", w.prompt.mean,
              w.prompt.range * 100, w.output.mean, w.output.range * 100, w.temperature);
  if (!w.image_uri.empty()) std::printf(", image in %g%% of requests", w.image_fraction * 100);
  if (w.system_chars > 0) std::printf(", a shared %d-char system prompt", w.system_chars);
  if (w.turns > 1)
    std::printf(", conversations of %d turns (each request resends the history with the answers)", w.turns);
  std::printf("\n");
  std::fflush(stdout);
}

// The plot's second title line: what was sent, and how.
std::string plot_subtitle(const std::string& rate, const RunOptions& o, const WorkloadOptions& w) {
  auto spread = [](double range) {
    char b[32] = "";
    if (range > 0) std::snprintf(b, sizeof b, " +-%g%%", range * 100);
    return std::string(b);
  };
  char b[256];
  std::snprintf(b, sizeof b,
                "%s, %s, rate %s/s, %zu requests, max concurrency %s, prompt %d chars%s, max_tokens %d%s%s",
                o.chat ? "chat" : "completions", o.stream ? "streamed" : "not streamed", rate.c_str(),
                o.requests, o.max_concurrency ? std::to_string(o.max_concurrency).c_str() : "unbounded",
                w.prompt.mean, spread(w.prompt.range).c_str(), w.output.mean, spread(w.output.range).c_str(),
                w.image_uri.empty() ? "" : ", with an image");
  std::string out = b;
  if (w.system_chars > 0) out += ", a shared " + std::to_string(w.system_chars) + "-char system prompt";
  if (w.turns > 1) out += ", conversations of " + std::to_string(w.turns) + " turns";
  return out;
}

struct Flags {
  std::string url, config, endpoint = "chat", rate = "inf", image, csv, json_out, extra_body, plot;
  std::string compare, compare_url, concurrency = "1,4,16";
  size_t requests = 0, max_concurrency = 0;
  double seconds = 0, timeout_s = 300;
  bool no_stream = false, quiet = false;
  WorkloadOptions w;
};

// One run of the workload against the server at `url`: what it measured. Nullopt (after saying why) if the
// URL is not usable.
struct Measured {
  std::vector<RequestRecord> records;
  Summary summary;
  std::string model;
};

std::optional<Measured> measure(const std::string& url, const Flags& f, RunOptions o, WorkloadOptions w,
                                bool header) {
  const Url u = parse_url(url);
  if (!u.ok) {
    std::fprintf(stderr, "--url %s: %s\n", url.c_str(), u.error.c_str());
    return std::nullopt;
  }
  // A base URL given as the SDKs take it (.../v1) works too.
  o.prefix = u.prefix.size() >= 3 && u.prefix.substr(u.prefix.size() - 3) == "/v1"
                 ? u.prefix.substr(0, u.prefix.size() - 3)
                 : u.prefix;
  boost::asio::io_context io;
  boost::asio::ip::tcp::endpoint endpoint;
  try {
    endpoint = resolve(io, u);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot resolve %s: %s\n", u.host.c_str(), e.what());
    return std::nullopt;
  }
  AsyncHttp http(io, endpoint, u.host + ":" + u.port, std::chrono::milliseconds(int64_t(f.timeout_s * 1000)));
  if (w.model.empty()) w.model = first_model(io, http, o.prefix);
  if (w.model.empty()) {
    std::fprintf(stderr, "GET /v1/models listed no model; naming it \"epd\" (set --model)\n");
    w.model = "epd";
  }
  if (header) print_header(url, f.rate, o, w);
  Workload workload(w);
  Runner runner(io, http, workload, o);
  runner.start();
  io.run();
  Measured m;
  m.records = runner.records();
  m.summary = summarize(m.records, runner.duration_s());
  m.summary.max_in_flight = runner.max_in_flight();
  m.summary.connections = http.connections_opened();
  m.model = w.model;
  return m;
}

int run(const Flags& f, RunOptions o, WorkloadOptions w) {
  std::unique_ptr<launcher::ProcessGroup> cluster;
  std::string url = f.url;
  if (!f.config.empty()) {
    auto cfg = config::load_cluster_config(f.config);
    if (!cfg) {
      std::fprintf(stderr, "%s\n", cfg.error().detail.c_str());
      return 2;
    }
    const auto [host, port] = router_address(*cfg);
    cluster = start_cluster(f.config, host, port, cfg->instances.size());
    if (!cluster) return 1;
    url = "http://" + host + ":" + std::to_string(port);
  }
  auto measured = measure(url, f, o, w, true);
  if (cluster) cluster->stop();
  if (!measured) return 2;
  w.model = measured->model;
  const Summary& s = measured->summary;
  const auto& records = measured->records;
  print_summary(stdout, s, o.stream);
  if (!f.csv.empty() && !write_csv(f.csv, records)) {
    std::fprintf(stderr, "cannot write %s\n", f.csv.c_str());
    return 2;
  }
  if (!f.json_out.empty()) {
    json j = {{"url", url},         {"endpoint", o.chat ? "chat" : "completions"},
              {"model", w.model},   {"rate", f.rate},
              {"stream", o.stream}, {"max_concurrency", o.max_concurrency},
              {"seed", o.seed},     {"summary", to_json(s)}};
    std::ofstream out(f.json_out);
    out << j.dump(2) << "\n";
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", f.json_out.c_str());
      return 2;
    }
  }
  if (!f.plot.empty()) {
    RunOptions shown = o;
    shown.requests = records.size();
    const auto plot = serve_latency_plot(records, plot_subtitle(f.rate, shown, w));
    if (auto e = render_plot(f.plot, plot); !e.empty()) {
      std::fprintf(stderr, "epd-bench serve: --plot: %s\n", e.c_str());
      return 1;
    }
    std::printf("plot: %s\n", (std::filesystem::path(f.plot) / plot.png_file()).c_str());
  }
  return s.failed == 0 && s.ok > 0 ? 0 : 1;
}

// The concurrency levels of --concurrency ("1,4,16"); empty if it does not parse.
std::vector<size_t> concurrency_levels(const std::string& list) {
  std::vector<size_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) {
    try {
      const long v = std::stol(item);
      if (v < 1 || v > 256) return {};
      out.push_back(size_t(v));
    } catch (const std::exception&) {
      return {};
    }
  }
  return out;
}

void print_compare_row(size_t level, const char* server, const Summary& s) {
  std::printf("%5zu  %-12s %7.2f %8.1f %9.1f %9.1f %8.1f %8.1f %9.1f %9.1f %6zu\n", level, server,
              s.requests_per_s, s.output_tokens_per_s, s.ttft.p50, s.ttft.p99, s.itl.p50, s.itl.p99,
              s.e2e.p50, s.e2e.p99, s.failed);
}

// The comparison's table, errors, ratios and memory; returns the failed requests of both servers.
size_t print_comparison(const std::vector<size_t>& levels, const std::vector<CompareLevel>& rows,
                        double epd_rss, double llama_rss, double throughput_goal) {
  std::printf("\n%5s  %-12s %7s %8s %9s %9s %8s %8s %9s %9s %6s\n", "conc", "server", "req/s", "out tok/s",
              "TTFT p50", "TTFT p99", "ITL p50", "ITL p99", "E2E p50", "E2E p99", "failed");
  size_t failed = 0;
  for (size_t i = 0; i < levels.size(); ++i) {
    print_compare_row(levels[i], "epd", rows[i].epd);
    print_compare_row(levels[i], "llama-server", rows[i].llama);
    failed += rows[i].epd.failed + rows[i].llama.failed;
  }
  for (size_t i = 0; i < levels.size(); ++i)
    if (!rows[i].epd.ttft_by_turn.empty()) {
      std::printf("  concurrency %zu, epd:\n", levels[i]);
      print_turns(stdout, rows[i].epd, "    ");
      std::printf("  concurrency %zu, llama-server:\n", levels[i]);
      print_turns(stdout, rows[i].llama, "    ");
    }
  for (size_t i = 0; i < levels.size(); ++i) {
    const std::pair<const char*, const Summary*> servers[] = {{"epd", &rows[i].epd},
                                                              {"llama-server", &rows[i].llama}};
    for (const auto& [name, s] : servers)
      for (const auto& [error, n] : s->errors)
        std::printf("  concurrency %zu, %s: %zu x %s\n", levels[i], name, n, error.c_str());
  }
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  std::printf(
      "\nepd / llama-server (times in ms above; throughput ratios > 1 and latency ratios < 1 favour epd):\n");
  for (size_t i = 0; i < levels.size(); ++i) {
    const auto& e = rows[i].epd;
    const auto& l = rows[i].llama;
    std::printf(
        "  concurrency %zu: requests/s %.2fx, output tokens/s %.2fx, TTFT p50 %.2fx p99 %.2fx, "
        "ITL p50 %.2fx, E2E p50 %.2fx p99 %.2fx\n",
        levels[i], ratio(e.requests_per_s, l.requests_per_s),
        ratio(e.output_tokens_per_s, l.output_tokens_per_s), ratio(e.ttft.p50, l.ttft.p50),
        ratio(e.ttft.p99, l.ttft.p99), ratio(e.itl.p50, l.itl.p50), ratio(e.e2e.p50, l.e2e.p50),
        ratio(e.e2e.p99, l.e2e.p99));
  }
  if (llama_rss > 0)
    std::printf("peak RSS (sum over each server's processes): epd %.1f MiB, llama-server %.1f MiB (%.2fx)\n",
                epd_rss, llama_rss, ratio(epd_rss, llama_rss));
  else
    std::printf(
        "peak RSS (sum over each server's processes): epd %.1f MiB, llama-server not measured "
        "(--compare-url: not started here)\n",
        epd_rss);
  const size_t top = size_t(std::max_element(levels.begin(), levels.end()) - levels.begin());
  std::printf("goal at concurrency %zu: output tokens/s >= %.1fx (%.2fx), TTFT p99 <= 1.0x (%.2fx)\n",
              levels[top], throughput_goal,
              ratio(rows[top].epd.output_tokens_per_s, rows[top].llama.output_tokens_per_s),
              ratio(rows[top].epd.ttft.p99, rows[top].llama.ttft.p99));
  return failed;
}

// `--compare llama-server`: the same workload against epd's cluster (--config) and against llama-server on
// the same GGUF and mmproj, both up at once and on the same cores, at each --concurrency level (the order
// alternating from level to level); both rows and their ratios. --compare-url names a llama-server already
// running instead (its memory is then not measured).
int run_compare(const Flags& f, RunOptions o, WorkloadOptions w) {
  const auto levels = concurrency_levels(f.concurrency);
  if (levels.empty()) {
    std::fprintf(stderr, "--concurrency: a comma-separated list of levels in 1..256, e.g. 1,4,16\n");
    return 2;
  }
  auto bc = load_bench_config(f.config);
  if (!bc) return 2;
  const auto& m = bc->model;
  const bool own_llama = f.compare_url.empty();
  if (own_llama && (m.checkpoint.size() < 5 || m.checkpoint.substr(m.checkpoint.size() - 5) != ".gguf")) {
    std::fprintf(stderr, "--compare llama-server: %s serves no GGUF file (model.path)\n", f.config.c_str());
    return 2;
  }
  const auto [host, port] = router_address(bc->cluster);
  auto cluster = start_cluster(f.config, host, port, bc->cluster.instances.size());
  if (!cluster) return 1;
  const std::string epd_url = "http://" + host + ":" + std::to_string(port);
  LlamaServerOptions lo;
  lo.model = m.checkpoint;
  lo.mmproj = m.mmproj;
  lo.threads = std::max(1u, std::thread::hardware_concurrency());
  lo.parallel = uint32_t(*std::max_element(levels.begin(), levels.end()));
  lo.ctx_per_slot = m.max_seq;
  lo.log_file = (std::filesystem::temp_directory_path() / "epd-bench-llama-server.log").string();
  std::unique_ptr<LlamaServer> llama;
  if (own_llama) {
    llama = LlamaServer::start(lo);
    if (!llama) return 1;
  }
  const std::string llama_url = own_llama ? llama->url() : f.compare_url;

  std::printf("epd-bench serve --compare llama-server: model %s%s%s\n", m.checkpoint.c_str(),
              m.mmproj.empty() ? "" : " + ", m.mmproj.c_str());
  bool own_threads = false;  // an instance sets `threads` of its own
  for (const auto& inst : bc->cluster.instances) own_threads = own_threads || inst.settings.has("threads");
  std::printf(
      "  epd: %s, %zu role processes sharing the %u cores, %u compute thread%s each (model.threads%s)\n",
      f.config.c_str(), bc->cluster.instances.size(), lo.threads, m.threads, m.threads == 1 ? "" : "s",
      own_threads ? "; some instances set their own" : "");
  std::printf("  llama-server: %s\n",
              own_llama ? llama->command().c_str() : (llama_url + ", already running").c_str());
  std::string shape =
      std::string(o.chat ? "chat" : "completions") + ", " + (o.stream ? "streamed" : "not streamed");
  shape +=
      ", prompt " + std::to_string(w.prompt.mean) + " chars, max_tokens " + std::to_string(w.output.mean);
  if (!w.image_uri.empty())
    shape +=
        ", an image in " + std::to_string(int(w.image_fraction * 100)) + "% of requests (the same picture)";
  if (w.system_chars > 0) shape += ", a shared " + std::to_string(w.system_chars) + "-char system prompt";
  if (w.turns > 1) shape += ", conversations of " + std::to_string(w.turns) + " turns";
  std::printf("  %s, temperature %g\n", shape.c_str(), w.temperature);
  std::fflush(stdout);

  const auto launcher = cluster->status("epd-cluster");
  std::vector<CompareLevel> rows(levels.size());
  for (size_t i = 0; i < levels.size(); ++i) {
    RunOptions run = o;
    run.max_concurrency = levels[i];
    // By default 4 x the level (at least 16) requests, or as many conversations.
    run.requests =
        f.requests ? f.requests : std::max<size_t>(16, 4 * levels[i]) * size_t(std::max(1, w.turns));
    run.rate = std::numeric_limits<double>::infinity();
    rows[i].concurrency = levels[i];
    for (int k = 0; k < 2; ++k) {
      const bool epd_now = (k == 0) == (i % 2 == 1);  // llama-server first at even levels
      WorkloadOptions wl = w;
      wl.model.clear();  // each server's own name for it
      // Other words at each level (the same at both servers): no level finds the last one's prompts cached.
      wl.seed = w.seed + 1000003 * i;
      auto measured = measure(epd_now ? epd_url : llama_url, f, run, wl, false);
      if (!measured) return 2;
      (epd_now ? rows[i].epd : rows[i].llama) = measured->summary;
    }
    // Peaks so far (VmHWM only grows): what each server has needed up to this level.
    rows[i].epd_rss_mib = launcher ? tree_peak_rss_mib(launcher->pid) : 0;
    rows[i].llama_rss_mib = own_llama ? tree_peak_rss_mib(llama->pid()) : 0;
  }
  cluster->stop();
  llama.reset();

  // Repeated pictures and shared prefixes are what epd's caches are for: more is expected of it there.
  const bool shared = !w.image_uri.empty() || w.system_chars > 0 || w.turns > 1;
  const size_t failed =
      print_comparison(levels, rows, rows.back().epd_rss_mib, rows.back().llama_rss_mib, shared ? 1.5 : 1.0);
  if (!f.plot.empty()) {
    std::string subtitle = shape + ", requests per level:";
    for (const auto& r : rows) subtitle += " " + std::to_string(r.epd.sent);
    const auto plot = serve_compare_plot(rows, subtitle);
    if (auto e = render_plot(f.plot, plot); !e.empty()) {
      std::fprintf(stderr, "epd-bench serve: --plot: %s\n", e.c_str());
      return 1;
    }
    std::printf("plot: %s\n", (std::filesystem::path(f.plot) / plot.png_file()).c_str());
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int run_serve(int argc, char** argv) {
  CLI::App app{"epd-bench serve: OpenAI-API load generator (TTFT, ITL, E2E, throughput, HTTP/SSE overhead)"};
  Flags f;
  WorkloadOptions& w = f.w;
  auto* url = app.add_option("--url", f.url, "a running router, http://HOST:PORT");
  app.add_option("--config", f.config, "start this cluster config (epd-cluster) and use its router")
      ->excludes(url);
  app.add_option("--endpoint", f.endpoint, "chat | completions")
      ->check(CLI::IsMember({"chat", "completions"}));
  app.add_option("--model", w.model, "model name in the requests (default: the first of GET /v1/models)");
  app.add_option("--rate", f.rate, "requests/s, Poisson arrivals; inf = all at once");
  auto* req = app.add_option("--requests", f.requests, "requests to send");
  app.add_option("--seconds", f.seconds, "send arrivals for this long instead of a count")->excludes(req);
  app.add_option("--max-concurrency", f.max_concurrency,
                 "requests in flight at most; more wait (0 = unbounded)");
  app.add_option("--prompt-len", w.prompt.mean, "prompt length in characters (1 byte = 1 token)");
  app.add_option("--prompt-len-range", w.prompt.range, "uniform spread around it: 0.5 = ±50%")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--system-len", w.system_chars,
                 "a system prompt of this many characters that every request starts with (a shared prefix)")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--output-len", w.output.mean, "max_tokens of each request");
  app.add_option("--output-len-range", w.output.range, "uniform spread around it")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--temperature", w.temperature, "0 = greedy; above, request i carries seed + i");
  app.add_option("--extra-body", f.extra_body, "JSON object merged into every request, e.g. '{\"top_k\":5}'");
  app.add_option("--image", f.image, "a PNG, JPEG or PPM file sent as a data URI (chat only)");
  app.add_option("--image-fraction", w.image_fraction, "share of requests with the image")
      ->check(CLI::Range(0.0, 1.0));
  app.add_flag("--no-stream", f.no_stream, "ask for whole answers (TTFT is then the end-to-end latency)");
  app.add_option("--seed", w.seed, "seeds prompts, lengths, arrivals and sampling");
  app.add_option("--timeout", f.timeout_s, "seconds any one connect, write or read may take");
  app.add_option("--csv", f.csv, "write one row per request to this file");
  app.add_option("--json", f.json_out, "write the summary as JSON to this file");
  app.add_option("--plot", f.plot,
                 "write DIR/serve-latency-cdf.png (gnuplot): CDFs of TTFT (client and router) and ITL")
      ->type_name("DIR");
  app.add_flag("--quiet", f.quiet, "no progress line on stderr");
  app.add_option("--compare", f.compare,
                 "llama-server: run the same workload against llama.cpp's server on the same GGUF and mmproj "
                 "(needs --config), at each --concurrency level, and print both")
      ->check(CLI::IsMember({"llama-server"}));
  app.add_option("--concurrency", f.concurrency, "with --compare: the max-concurrency levels, e.g. 1,4,16");
  app.add_option(
      "--compare-url", f.compare_url,
      "with --compare: a llama-server already running at http://HOST:PORT, instead of starting one");
  app.add_option("--turns", w.turns,
                 "conversations of this many user turns: each request resends the history with the server's "
                 "answers (--requests counts requests, rounded up to whole conversations)")
      ->check(CLI::Range(1, 64));
  CLI11_PARSE(app, argc, argv);

  RunOptions o;
  o.chat = w.chat = f.endpoint == "chat";
  o.stream = w.stream = !f.no_stream;
  o.seed = w.seed;
  o.progress = !f.quiet;
  o.max_concurrency = f.max_concurrency;
  o.requests = f.requests;
  o.seconds = f.seconds;
  if (f.url.empty() && f.config.empty()) {
    std::fprintf(stderr, "give --url of a running router or --config of a cluster to start\n");
    return 2;
  }
  if (!o.requests && o.seconds <= 0) o.requests = 100;
  if (!f.plot.empty())
    if (auto e = prepare_plot_dir(f.plot); !e.empty()) {
      std::fprintf(stderr, "epd-bench serve: --plot: %s\n", e.c_str());
      return 2;
    }
  try {
    o.rate = f.rate == "inf" ? std::numeric_limits<double>::infinity() : std::stod(f.rate);
  } catch (const std::exception&) {
    o.rate = 0;
  }
  if (!(o.rate > 0)) {
    std::fprintf(stderr, "--rate must be a positive number or inf\n");
    return 2;
  }
  if (std::isinf(o.rate) && !o.requests && !o.max_concurrency) {
    std::fprintf(stderr, "--seconds with --rate inf needs --max-concurrency\n");
    return 2;
  }
  if (!f.extra_body.empty()) {
    w.extra_body = json::parse(f.extra_body, nullptr, false);
    if (!w.extra_body.is_object()) {
      std::fprintf(stderr, "--extra-body must be a JSON object\n");
      return 2;
    }
  }
  if (!f.image.empty()) {
    if (!o.chat) {
      std::fprintf(stderr, "--image needs --endpoint chat\n");
      return 2;
    }
    std::string error;
    w.image_uri = image_data_uri(f.image, error);
    if (!error.empty()) {
      std::fprintf(stderr, "--image: %s\n", error.c_str());
      return 2;
    }
  }
  if (w.turns > 1) {
    // The model's context, when the config says which model: the default user message is chosen so every
    // turn fits, and settings that cannot fit are refused before anything starts.
    std::optional<uint32_t> max_seq;
    if (!f.config.empty()) {
      const auto bc = load_bench_config(f.config);
      if (!bc) return 2;
      max_seq = bc->model.max_seq;
    }
    if (!app.count("--prompt-len"))
      w.prompt.mean = max_seq ? std::max(1, fitting_user_chars(w, *max_seq, 64)) : 32;
    if (max_seq)
      if (auto e = check_context(w, *max_seq); !e.empty()) {
        std::fprintf(stderr, "--turns %d: %s\n", w.turns, e.c_str());
        return 2;
      }
  }
  if (!f.compare_url.empty() && f.compare.empty()) {
    std::fprintf(stderr, "--compare-url needs --compare llama-server\n");
    return 2;
  }
  if (!f.compare.empty()) {
    if (f.config.empty()) {
      std::fprintf(stderr, "--compare needs --config (the cluster to start)\n");
      return 2;
    }
    return run_compare(f, o, w);
  }
  return run(f, o, w);
}

}  // namespace epd::bench

int run_serve_bench(int argc, char** argv) {
  return epd::bench::run_serve(argc, argv);
}

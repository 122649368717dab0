#include "serve_bench.hpp"

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>

#include "async_http.hpp"
#include "cluster.hpp"
#include "epd/config/cluster_config.hpp"
#include "plot.hpp"
#include "plot_kinds.hpp"
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
  return b;
}

struct Flags {
  std::string url, config, endpoint = "chat", rate = "inf", image, csv, json_out, extra_body, plot;
  size_t requests = 0, max_concurrency = 0;
  double seconds = 0, timeout_s = 300;
  bool no_stream = false, quiet = false;
  WorkloadOptions w;
};

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
  const Url u = parse_url(url);
  if (!u.ok) {
    std::fprintf(stderr, "--url %s: %s\n", url.c_str(), u.error.c_str());
    return 2;
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
    return 2;
  }
  AsyncHttp http(io, endpoint, u.host + ":" + u.port, std::chrono::milliseconds(int64_t(f.timeout_s * 1000)));
  if (w.model.empty()) w.model = first_model(io, http, o.prefix);
  if (w.model.empty()) {
    std::fprintf(stderr, "GET /v1/models listed no model; naming it \"epd\" (set --model)\n");
    w.model = "epd";
  }
  print_header(url, f.rate, o, w);
  Workload workload(w);
  Runner runner(io, http, workload, o);
  runner.start();
  io.run();
  if (cluster) cluster->stop();

  auto s = summarize(runner.records(), runner.duration_s());
  s.max_in_flight = runner.max_in_flight();
  s.connections = http.connections_opened();
  print_summary(stdout, s, o.stream);
  if (!f.csv.empty() && !write_csv(f.csv, runner.records())) {
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
    shown.requests = runner.records().size();
    const auto plot = serve_latency_plot(runner.records(), plot_subtitle(f.rate, shown, w));
    if (auto e = render_plot(f.plot, plot); !e.empty()) {
      std::fprintf(stderr, "epd-bench serve: --plot: %s\n", e.c_str());
      return 1;
    }
    std::printf("plot: %s\n", (std::filesystem::path(f.plot) / plot.png_file()).c_str());
  }
  return s.failed == 0 && s.ok > 0 ? 0 : 1;
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
  return run(f, o, w);
}

}  // namespace epd::bench

int run_serve_bench(int argc, char** argv) {
  return epd::bench::run_serve(argc, argv);
}

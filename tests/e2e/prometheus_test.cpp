// Every process's /metrics scraped by a real Prometheus (Debian's `prometheus`): the text passes
// `promtool check metrics`, the counts Prometheus reads back equal the requests sent, the transfer bytes
// equal the KV pages and embeddings those requests had to move (computed here from the model and the KV
// layout), and a fault-injected run moves the failure and retry counters by exactly the injected amounts.
#include <httplib.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <thread>

#include "cluster.hpp"
#include "epd/actors/aux_record.hpp"
#include "epd/model/config.hpp"
#include "epd/model/kv_cache.hpp"
#include "epd/model/kv_staging.hpp"
#include "epd/model/tokens.hpp"
#include "fault_seeds.hpp"
#include "prometheus_server.hpp"
#include "workload.hpp"

using namespace epd::testing;
using nlohmann::json;

namespace {

const std::string kRules = std::string(EPD_SOURCE_DIR) + "/configs/prometheus/epd-rules.yml";

// What a request must move: KV prefill -> decode (every layer's K and V of the prompt's tokens: whole pages,
// and the last page as far as the prompt goes; plus the aux record with the first token), and the image's
// embeddings encoder -> prefill. Decode's prefix cache is off: the prompts share their first tokens, which it
// would hold (docs/caches.md); prefill's moves no bytes.
struct Moved {
  uint64_t kv = 0;
  uint64_t embeddings = 0;
};

Moved bytes_to_move(const Case& c) {
  static const auto cfg = *epd::model::preset("tiny");
  std::optional<epd::model::MediaDims> dims;
  if (c.image) dims = epd::model::MediaDims{c.image->width, c.image->height};
  const auto prompt = *epd::model::build_prompt(cfg, c.prompt, dims);
  const auto layout = epd::model::kv_layout_for(cfg, 1, epd::model::DType::f16);  // the roles' default
  Moved m;
  m.kv = prompt.size() * epd::model::staging_token_bytes(layout) + sizeof(epd::actors::AuxRecord);
  if (dims) m.embeddings = epd::model::image_token_count(cfg, *dims) * cfg.d_model * sizeof(float);
  return m;
}

// The value of one series in a scrape: `name{labels...}` where every given label matches.
double sample(const std::string& text, const std::string& name,
              const std::map<std::string, std::string>& labels) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const auto& [k, v] : labels) all = all && line.find(k + "=\"" + v + "\"") != std::string::npos;
    if (all) return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return 0;
}

std::vector<std::string> targets(const Cluster& c) {
  std::vector<std::string> out;
  for (const auto& id : c.ids()) out.push_back("127.0.0.1:" + std::to_string(c.metrics_port(id)));
  return out;
}

}  // namespace

TEST_CASE("prometheus: a real server scrapes every process and reads back what the requests did",
          "[metrics][multiproc]") {
  ClusterSpec spec;
  spec.metrics = true;
  spec.defaults["decode"] = "prefix_cache_pages = 0\n";
  Cluster cluster(spec);
  cluster.start();

  for (const auto& id : cluster.ids()) {
    INFO(id);
    CHECK(promtool_check_metrics(cluster.scrape(id)).empty());
  }

  PrometheusServer prom(targets(cluster), {kRules});
  prom.start();
  INFO(prom.logs());
  const double instances = double(cluster.ids().size());
  REQUIRE(prom.wait_for("sum(up{job=\"epd\"})", [&](double v) { return v == instances; }) == instances);

  const auto cases = workload(12);  // every other one carries an image
  Moved expected;
  double max_ttft_s = 0;
  auto send = [&](const Case& c) {
    auto [status, body] = cluster.generate(request_of(c));
    REQUIRE(status == 200);
    max_ttft_s = std::max(max_ttft_s, body["timings_ms"]["first_token"].get<double>() / 1000);
    const Moved m = bytes_to_move(c);
    expected.kv += m.kv;
    expected.embeddings += m.embeddings;
  };
  // Transfer series appear with the first transfer; rate() needs a sample of them from before the rest.
  send(cases[0]);
  send(cases[1]);
  REQUIRE(prom.wait_for("count(epd_transfer_size_bytes_sum)", [](double v) { return v == 2; }) == 2);
  for (size_t i = 2; i < cases.size(); ++i) send(cases[i]);
  const double n = double(cases.size());

  // Counts equal the requests sent.
  CHECK(prom.wait_for("sum(epd_requests_total{outcome=\"completed\"})", [&](double v) { return v == n; }) ==
        n);
  CHECK(prom.wait_for("sum(epd_time_to_first_token_seconds_count)", [&](double v) { return v == n; }) == n);
  CHECK(prom.value("sum(epd_request_duration_seconds_count)") == n);
  CHECK(prom.value("sum(epd_request_stage_seconds_count{stage=\"kv_transfer\"})") == n);
  CHECK(prom.value("sum(epd_request_stage_seconds_count{stage=\"encode\"})") == n / 2);
  CHECK(prom.value("sum(epd_requests_total{outcome=\"failed\"})") == 0);

  // Bytes equal what the requests had to move, on each hop, and their rate is visible.
  const std::string kv_bytes = "sum(epd_transfer_size_bytes_sum{role=\"prefill\",peer_role=\"decode\"})";
  const std::string embed_bytes = "sum(epd_transfer_size_bytes_sum{role=\"encoder\",peer_role=\"prefill\"})";
  CHECK(prom.wait_for(kv_bytes, [&](double v) { return v == double(expected.kv); }) == double(expected.kv));
  CHECK(prom.wait_for(embed_bytes, [&](double v) { return v == double(expected.embeddings); }) ==
        double(expected.embeddings));
  CHECK(prom.value("sum(epd_transfer_size_bytes_count{role=\"prefill\",peer_role=\"decode\"})") >= n);
  // rate() needs two samples of a series; the transfer series start at the first transfer.
  const auto kv_rate = prom.wait_for("sum(rate(epd_transfer_size_bytes_sum{role=\"prefill\"}[2m]))",
                                     [](double v) { return v > 0; });
  CHECK(kv_rate.value_or(0) > 0);
  // The recording rule of configs/prometheus/epd-rules.yml computes the same rate per instance.
  const auto recorded =
      prom.wait_for("sum(epd:transfer_bytes:rate1m{role=\"prefill\"})", [](double v) { return v > 0; });
  CHECK(recorded.value_or(0) > 0);

  // A TTFT quantile from the histogram: within the buckets that hold the TTFTs the clients saw.
  const auto p50 =
      prom.value("histogram_quantile(0.5, sum by (le) (rate(epd_time_to_first_token_seconds_bucket[2m])))");
  REQUIRE(p50);
  CHECK(std::isfinite(*p50));
  CHECK(*p50 > 0);
  double bucket_above_max = 60;
  for (double b :
       {1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0})
    if (b >= max_ttft_s) {
      bucket_above_max = b;
      break;
    }
  CHECK(*p50 <= bucket_above_max);
  std::printf(
      "prometheus: %g requests; TTFT p50 %.6f s (slowest client TTFT %.6f s); KV bytes %.0f (expected %llu); "
      "embedding bytes %.0f (expected %llu); KV bytes/s over 2m %.0f\n",
      n, *p50, max_ttft_s, prom.value(kv_bytes).value_or(-1), (unsigned long long)expected.kv,
      prom.value(embed_bytes).value_or(-1), (unsigned long long)expected.embeddings, kv_rate.value_or(0));
  const auto itl_count = prom.value("sum(epd_inter_token_latency_seconds_count)");
  CHECK(itl_count.value_or(0) > 0);

  // The gauges the operator watches.
  CHECK(prom.value("sum(epd_instances{healthy=\"true\"})") == instances);
  CHECK(prom.value("epd_kv_pages_capacity{role=\"decode\"}") == 512);
  CHECK(prom.wait_for("epd_kv_pages_free{role=\"decode\"}", [](double v) { return v == 512; }) == 512);
  CHECK(prom.value("sum(epd_peer_incarnations_seen_total{role=\"router\"})") == instances - 1);
  // Every process's resident memory: a real size (above the MiB its libraries alone map) and a peak no
  // smaller than it (the two series match one to one, on instance_id and role).
  CHECK(prom.value("count(epd_process_resident_memory_bytes > 1048576)") == instances);
  CHECK(
      prom.value("count(epd_process_resident_memory_peak_bytes - epd_process_resident_memory_bytes >= 0)") ==
      instances);
}

TEST_CASE("prometheus: an injected embedding write failure moves the failure and retry counters by one",
          "[metrics][fault][multiproc]") {
  // As in fault 3: the first embedding write fails, and so does its retry on a fresh session.
  const uint64_t seed = seed_failing_first_job(0.05, 40);
  ClusterSpec spec;
  spec.metrics = true;
  spec.instance_extra["encoder-0"] =
      "[instance.transport]\nfault_error_rate = 0.05\nfault_seed = " + std::to_string(seed) + "\n";
  Cluster cluster(spec);
  cluster.start();
  const auto cases = workload(20);  // 10 with an image: 10 embedding writes
  for (const auto& c : cases) {
    auto [status, body] = cluster.generate(request_of(c));
    INFO(body.dump());
    REQUIRE(status == 200);
  }
  const std::string encoder = cluster.scrape("encoder-0");
  const std::string router = cluster.scrape("router");
  CHECK(promtool_check_metrics(encoder).empty());
  CHECK(promtool_check_metrics(router).empty());
  // The encoder: one write retried on a fresh session, which failed too: one job failed for good.
  CHECK(sample(encoder, "epd_transfer_retries_total", {}) == 1);
  CHECK(sample(encoder, "epd_transfer_failures_total",
               {{"code", "injected_fault"}, {"peer_role", "prefill"}}) == 1);
  CHECK(sample(encoder, "epd_transfer_worker_restarts_total", {}) == 0);
  CHECK(sample(encoder, "epd_transfer_size_bytes_count", {{"peer_role", "prefill"}}) == 10);
  // The router: that room retried once for that cause; every request completed, none failed.
  CHECK(sample(router, "epd_request_retries_total", {{"code", "injected_fault"}}) == 1);
  CHECK(sample(router, "epd_requests_total", {{"outcome", "completed"}}) == 20);
  CHECK(sample(router, "epd_requests_total", {{"outcome", "failed"}}) == 0);
  CHECK(router.find("epd_request_failures_total{") == std::string::npos);
}

TEST_CASE("prometheus: a killed and restarted decode shows as a lost peer and a new incarnation",
          "[metrics][fault][multiproc]") {
  ClusterSpec spec;
  spec.metrics = true;
  spec.restart = true;
  Cluster cluster(spec);
  cluster.start();
  const uint64_t before = cluster.instance("decode-0")["incarnation"].get<uint64_t>();
  const std::string decode_before = cluster.scrape("decode-0");
  CHECK(decode_before.find("incarnation=\"" + std::to_string(before) + "\"") != std::string::npos);
  CHECK(sample(cluster.scrape("router"), "epd_peer_incarnations_seen_total", {{"peer_role", "decode"}}) == 1);

  REQUIRE(::kill(cluster.pid("decode-0"), SIGKILL) == 0);
  const json after = cluster.instance_when(
      "decode-0",
      [&](const json& i) { return i.value("healthy", false) && i["incarnation"].get<uint64_t>() != before; },
      20000);
  REQUIRE(after["incarnation"].get<uint64_t>() != before);
  // The router saw the old incarnation go (its connection broke, or the registry dropped it) and the new
  // one arrive; so did prefill, which writes to decode.
  for (const std::string id : {"router", "prefill-0"}) {
    INFO(id);
    std::string text;
    for (int i = 0; i < 50; ++i) {  // PEERS reaches each instance within a heartbeat or two
      text = cluster.scrape(id);
      if (sample(text, "epd_peer_incarnations_seen_total", {{"peer_role", "decode"}}) == 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    CHECK(sample(text, "epd_peer_incarnations_seen_total", {{"peer_role", "decode"}}) == 2);
    CHECK(sample(text, "epd_peers_lost_total", {{"peer_role", "decode"}, {"how", "connection"}}) +
              sample(text, "epd_peers_lost_total", {{"peer_role", "decode"}, {"how", "left"}}) >=
          1);
  }
  const std::string decode_after = cluster.scrape("decode-0");
  CHECK(decode_after.find("incarnation=\"" + std::to_string(after["incarnation"].get<uint64_t>()) + "\"") !=
        std::string::npos);
  // And requests are served again.
  auto [status, body] = cluster.generate(request_of(workload(1)[0]));
  CHECK(status == 200);
}

TEST_CASE("prometheus: scrapes every process over TLS with a bearer key and strangers get nothing",
          "[metrics][security][multiproc]") {
  ClusterSpec spec;
  spec.metrics = true;
  spec.metrics_key = "scrape-key-for-the-e2e-prometheus";
  spec.metrics_tls = true;
  Cluster cluster(spec);
  cluster.start();
  PrometheusServer prom(targets(cluster), {}, ScrapeAuth{cluster.ca_file(), spec.metrics_key});
  prom.start();
  const auto n = double(cluster.ids().size());
  INFO(prom.logs());
  CHECK(prom.wait_for("sum(up{job=\"epd\"})", [&](double v) { return v == n; }).value_or(0) == n);
  CHECK(prom.value("count(epd_info)").value_or(0) == n);

  // Without the key (or over plain HTTP) nothing is served, and each refusal is counted where it happened.
  const std::string url = "https://127.0.0.1:" + std::to_string(cluster.metrics_port("decode-0"));
  httplib::Client stranger(url);
  stranger.set_ca_cert_path(cluster.ca_file().string());
  auto refused = stranger.Get("/metrics");
  REQUIRE(refused);
  CHECK(refused->status == 401);
  CHECK(refused->body.find("epd_") == std::string::npos);
  stranger.set_bearer_token_auth("not-the-scrape-key-at-all");
  CHECK(stranger.Get("/metrics")->status == 401);
  httplib::Client plain("127.0.0.1", cluster.metrics_port("decode-0"));
  plain.set_read_timeout(2, 0);
  auto cleartext = plain.Get("/metrics");
  CHECK((!cleartext || cleartext->status != 200));
  CHECK(sample(cluster.scrape("decode-0"), "epd_metrics_unauthorized_total", {}) == 2);
  CHECK(prom.wait_for("epd_metrics_unauthorized_total{role=\"decode\"}", [](double v) { return v == 2; })
            .value_or(0) == 2);
}

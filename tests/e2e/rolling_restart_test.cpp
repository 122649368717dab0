// A rolling restart (issue 36): every encoder, prefill and decode of a 2x2x2 cluster restarted in turn
// under steady load, as epd-cluster does on SIGHUP (launcher::roll_instances on the test's process group).
// Each drains on its SIGTERM and comes back as a new incarnation before the next goes: no request fails,
// every answer is the colocated run's, and streamed answers arrive whole.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <map>
#include <thread>

#include "cluster.hpp"
#include "epd/launcher/rolling_restart.hpp"
#include "load.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;

namespace {

double p99(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(0.99 * double(v.size() - 1) + 0.5))];
}

}  // namespace

TEST_CASE(
    "rolling restart: every encoder, prefill and decode of a 2x2x2 cluster in turn under load fails nothing",
    "[e2e][multiproc]") {
  ClusterSpec spec;
  spec.encoders = 2;
  spec.prefills = 2;
  spec.decodes = 2;
  spec.restart = false;                              // only the roll restarts anything
  spec.defaults["decode"] = "step_delay_ms = 10\n";  // answers long enough to be mid-stream at every stop
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "rolling-restart"};

  const Outcome steady = run_load(cluster, 40, 4);
  REQUIRE(steady.completed == 40);

  const std::vector<std::string> ids = {"encoder-0", "encoder-1", "prefill-0",
                                        "prefill-1", "decode-0",  "decode-1"};
  std::map<std::string, pid_t> before;
  for (const auto& id : ids) before[id] = cluster.pid(id);
  // Streams in flight through the roll, on two clients beside the load.
  std::atomic<bool> rolling{true};
  std::vector<std::future<std::vector<std::pair<std::string, Streamed>>>> streamers;
  for (int c = 0; c < 2; ++c)
    streamers.push_back(std::async(std::launch::async, [&, c] {
      std::vector<std::pair<std::string, Streamed>> got;
      for (int i = 0; rolling.load() || i < 3; ++i) {
        const std::string prompt = "stream " + std::to_string(c) + "." + std::to_string(i) + " of the roll";
        got.emplace_back(prompt, stream_completion(cluster, {{"prompt", prompt}, {"max_tokens", 12}}));
      }
      return got;
    }));
  // One at a time: at every moment each role keeps an instance that takes new work (healthy, not draining).
  std::map<std::string, int> fewest = {{"encoder", 2}, {"prefill", 2}, {"decode", 2}};
  auto watcher = std::async(std::launch::async, [&] {
    while (rolling.load()) {
      std::map<std::string, int> serving;
      for (const auto& i : cluster.instances())
        if (i.value("healthy", false) && !i.value("draining", false)) ++serving[i.value("role", "")];
      for (auto& [role, n] : fewest) n = std::min(n, serving[role]);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  protocol::Status rolled;
  int64_t roll_ms = 0;
  const Outcome during = run_load(cluster, 400, 4, 10, [&] {
    launcher::RollOptions ro;
    launcher::HostPort router;
    router.host = "127.0.0.1";
    router.port = uint16_t(cluster.http_port());
    ro.routers.push_back(router);
    const auto t = std::chrono::steady_clock::now();
    rolled = launcher::roll_instances(cluster.group(), ids, ro, cluster.sink());
    roll_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t).count();
    rolling = false;
  });
  rolling = false;
  watcher.get();
  std::vector<std::pair<std::string, Streamed>> streams;
  for (auto& s : streamers)
    for (auto& got : s.get()) streams.push_back(std::move(got));

  report("rolling restart of 6 instances", during, cluster.stats(), "roll");
  std::printf(
      "[roll] %d ms for 6 instances; TTFT p99 steady %.1f ms, during the roll %.1f ms (%.2fx); %zu streams\n",
      int(roll_ms), p99(steady.first_token_ms), p99(during.first_token_ms),
      p99(during.first_token_ms) / std::max(1e-9, p99(steady.first_token_ms)), streams.size());
  INFO(during.first_error << "\n" << cluster.logs());
  REQUIRE(rolled.ok());
  for (const auto& id : ids) CHECK(cluster.pid(id) != before[id]);  // every one is a new process
  for (const auto& [role, n] : fewest) {
    INFO(role);
    CHECK(n == 1);  // one of its two was always serving, and the other was restarting at some point
  }
  CHECK(during.completed == 400);
  CHECK(during.retried == 0);  // drained, not failed over
  CHECK(during.failed == 0);
  CHECK(during.lost == 0);
  CHECK(during.wrong == 0);
  // Every stream arrived whole: what the same request answers at once, now that the roll is over.
  for (const auto& [prompt, s] : streams) {
    INFO(prompt);
    REQUIRE(s.status == 200);
    CHECK(s.done);
    const auto [status, raw] =
        cluster.post_raw("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 12}}.dump());
    REQUIRE(status == 200);
    const json whole = json::parse(raw);
    CHECK(s.text == whole["choices"][0]["text"]);
    CHECK(s.finish_reason == whole["choices"][0]["finish_reason"]);
  }
  check_all_free(cluster);
}

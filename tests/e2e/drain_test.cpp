// Drain (issue 36): SIGTERM on an encoder, a prefill and a decode, one after the other under steady load.
// Each says `draining` in its heartbeats, the router stops placing there, it finishes what it holds and
// exits 0 — and no request fails or even needs a retry, where a stop used to fail its rooms and cost a
// burst of retries.
#include <signal.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

#include "cluster.hpp"
#include "load.hpp"

using namespace epd;
using namespace epd::testing;

namespace {

// SIGTERM to `id` twice, as a launcher signals the process group and then the process: the second lands
// mid-drain and must not cut it short (it did, on a thread OpenBLAS started before main). Then waits
// (bounded) for it to exit; returns how it ended.
std::string stop_gracefully(Cluster& cluster, const std::string& id) {
  ::kill(cluster.pid(id), SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ::kill(cluster.pid(id), SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    auto s = cluster.group().status(id);
    if (s && s->state != launcher::ChildState::running) return s->last_exit;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return "still running after 20 s";
}

}  // namespace

TEST_CASE("drain: SIGTERM on an encoder, a prefill and a decode under load fails no request and retries none",
          "[e2e][multiproc]") {
  ClusterSpec spec;
  spec.encoders = 2;
  spec.prefills = 2;
  spec.decodes = 2;
  spec.restart = false;
  // Answers slow enough that every stop finds rooms in flight on every role, and attempts still decoding
  // whose encoder and prefill have left.
  spec.defaults["decode"] = "step_delay_ms = 25\n";
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "drain"};
  std::vector<std::string> exits;
  const Outcome o = run_load(cluster, 60, 6, 10, [&] {
    for (const char* id : {"encoder-1", "prefill-1", "decode-1"}) {
      exits.push_back(stop_gracefully(cluster, id));
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // load goes on meanwhile
    }
  });
  const auto stats = cluster.stats();
  report("drain encoder-1, prefill-1, decode-1", o, stats, "drain");
  INFO(o.first_error << "\n" << cluster.logs());
  CHECK(exits == std::vector<std::string>(3, "exited with status 0"));
  CHECK(o.completed == 60);
  CHECK(o.failed == 0);
  CHECK(o.lost == 0);
  CHECK(o.wrong == 0);
  CHECK(o.retried == 0);
  CHECK(stats["retries"].get<uint64_t>() == 0);
  const std::string logs = cluster.logs();
  CHECK(count_lines(logs, "drained in") == 3);
  CHECK(count_lines(logs, "is draining: no new placements") == 3);
  check_all_free(cluster);
}

// Per-request state does not outlive its request (issue 11, defect 4): after many requests the router's
// published tables are back at their idle sizes and the roles hold no rooms; refused large bodies give their
// memory back; and the per-role deadline timers (one timer per role, not one delayed message per request)
// still fail rooms and requests whose inputs never come.
#include <signal.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "cluster.hpp"
#include "load.hpp"
#include "workload.hpp"

using namespace epd::testing;
using nlohmann::json;

namespace {

// VmRSS of a process in bytes.
[[maybe_unused]] uint64_t rss_bytes(pid_t pid) {  // unused in ASan builds (see below)
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

// Sends `n` times `body`, `parallel` at a time; returns how many answers had each HTTP status.
std::map<int, int> send_all(const Cluster& cluster, const std::string& body, int n, int parallel) {
  std::map<int, int> statuses;
  std::mutex mu;
  std::atomic<int> next{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t)
    threads.emplace_back([&] {
      while (next++ < n) {
        const int status = cluster.post_raw("/v1/generate", body).first;
        std::lock_guard lock(mu);
        ++statuses[status];
      }
    });
  for (auto& t : threads) t.join();
  return statuses;
}

// Every table is back at its idle size and every instance holds no room.
void check_idle(const Cluster& cluster) {
  const json tables = cluster.stats().value("tables", json::object());
  INFO(tables.dump());
  CHECK(tables.value("requests", -1) == 0);
  CHECK(tables.value("rooms", -1) == 0);
  CHECK(tables.value("instances_in_flight", -1) == 0);
  CHECK(tables.value("timeout_timers", 99) <= 1);
  const json inst = cluster.wait_all_free(15000);
  INFO(inst.dump());
  for (const auto& i : inst) CHECK(i.value("active_rooms", -1) == 0);
}

}  // namespace

TEST_CASE("soak: 400 requests leave no per-request state behind, refused 10 MiB bodies free their memory",
          "[e2e][multiproc][soak]") {
  Cluster cluster(ClusterSpec{});
  cluster.start();
  const std::string small = json{{"prompt", "twenty bytes prompt!"}, {"max_tokens", 4}}.dump();
  CHECK(send_all(cluster, small, 400, 8) == std::map<int, int>{{200, 400}});
  check_idle(cluster);

#if !defined(__SANITIZE_ADDRESS__)  // ASan's allocator keeps freed memory in its quarantine by design
  // Bodies this size are read whole (they could carry an image), then refused for the prompt's length.
  // glibc's dynamic mmap threshold used to keep ~30 MB per HTTP thread: +240 MB after 50 such bodies.
  const pid_t router = cluster.pid("router");
  const uint64_t before = rss_bytes(router);
  const std::string big = json{{"prompt", std::string(10u << 20, 'a')}, {"max_tokens", 4}}.dump();
  CHECK(send_all(cluster, big, 24, 8) == std::map<int, int>{{413, 24}});
  const uint64_t after = rss_bytes(router);
  INFO("router RSS " << before / 1024 << " kB -> " << after / 1024 << " kB");
  CHECK(after < before + (64u << 20));
#endif
  CHECK(send_all(cluster, small, 8, 8) == std::map<int, int>{{200, 8}});
}

TEST_CASE("soak: deadlines still fail rooms and requests whose inputs never come (one timer per role)",
          "[e2e][multiproc][soak]") {
  ClusterSpec spec;
  spec.max_attempts = 1;
  spec.heartbeat_misses = 100;     // 10 s: a SIGSTOPped process stays alive to its peers during the test
  spec.request_timeout_ms = 6000;  // well past the roles' 1 s deadlines, even on a loaded machine
  spec.defaults["prefill"] = "bootstrap_timeout_ms = 1000\n";
  spec.defaults["decode"] = "waiting_timeout_ms = 1000\n";
  spec.defaults["encoder"] = "waiting_timeout_ms = 1000\n";
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "soak-deadlines"};
  const json text = json{{"prompt", "hello"}, {"max_tokens", 4}};
  // Stops `ids` (SIGSTOP: silent, not dead) while 3 requests run; each must fail with `code`.
  auto run_stopped = [&](const json& request, std::vector<std::string> ids, const std::string& code) {
    for (const auto& id : ids) ::kill(cluster.pid(id), SIGSTOP);
    std::vector<json> answers(3);
    std::vector<std::thread> threads;
    for (auto& a : answers) threads.emplace_back([&] { a = cluster.generate(request).second; });
    for (auto& t : threads) t.join();
    for (const auto& id : ids) ::kill(cluster.pid(id), SIGCONT);
    for (const auto& a : answers) {
      INFO(a.dump());
      CHECK(a.value("/error/code"_json_pointer, std::string()) == code);
    }
    check_idle(cluster);
  };
  SECTION("prefill: SUBMIT without BOOTSTRAP (decode stopped)") {
    run_stopped(text, {"decode-0"}, "bootstrap_timeout");
  }
  // A silent prefill that has not started a room looks to decode and the encoder like one with a queue: they
  // wait within the request's budget, the router's timeout ends the request and its cancel frees the rooms
  // (docs/failure-handling.md, "Deadlines"). Decode's own timer for a started room: the stale writer tests.
  SECTION("decode: BOOTSTRAP sent, KV never comes (prefill stopped)") {
    run_stopped(text, {"prefill-0"}, "timeout");
  }
  SECTION("encoder: nobody asks for the embeddings (prefill and decode stopped)") {
    const Case with_image = workload(2).at(1);  // odd cases carry an image
    REQUIRE(with_image.image);
    run_stopped(request_of(with_image), {"prefill-0", "decode-0"}, "timeout");
    CHECK(cluster.logs().find("did not ask for room") == std::string::npos);  // the encoder waited
  }
  SECTION("router: nobody answers (prefill and decode stopped)") {
    run_stopped(text, {"prefill-0", "decode-0"}, "timeout");
  }
  // Serving goes on.
  CHECK(cluster.generate(text).first == 200);
}

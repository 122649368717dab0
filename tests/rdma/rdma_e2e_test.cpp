// The whole pipeline over real verbs (issue 17): router, encoder, prefill and decode as separate processes
// with `backend = "rdma"`, inside the Soft-RoCE VM (scripts/rdma-vm; they need an RDMA device, so they are
// tagged [vm] and not run on the host). Answers are checked against the colocated run (the code epd-run
// uses); each instance's /metrics proves that every embedding and KV transfer went over rdma and none over
// another backend.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "cluster.hpp"
#include "load.hpp"
#include "workload.hpp"

using namespace epd;
using namespace epd::testing;
using nlohmann::json;

namespace {

// Bytes and jobs of one backend's delivered transfers, from epd_transfer_size_bytes_{sum,count}.
struct Moved {
  double bytes = 0;
  double jobs = 0;
};

// backend -> peer_role -> what an instance's /metrics says it delivered.
std::map<std::string, std::map<std::string, Moved>> transfers_of(const std::string& text) {
  static const std::regex line(R"(^epd_transfer_size_bytes_(sum|count)\{([^}]*)\} ([0-9.eE+-]+)$)");
  static const std::regex backend_re(R"re(backend="([^"]*)")re");
  static const std::regex role_re(R"re(peer_role="([^"]*)")re");
  std::map<std::string, std::map<std::string, Moved>> out;
  std::istringstream in(text);
  std::string l;
  std::smatch m, b, r;
  while (std::getline(in, l)) {
    if (!std::regex_match(l, m, line)) continue;
    const std::string labels = m[2];
    if (!std::regex_search(labels, b, backend_re) || !std::regex_search(labels, r, role_re)) continue;
    Moved& mv = out[b[1]][r[1]];
    (m[1] == "sum" ? mv.bytes : mv.jobs) += std::stod(m[3]);
  }
  return out;
}

// Sum of the unlabelled or labelled samples of counter `name` in `text`.
double counter_of(const std::string& text, const std::string& name) {
  const std::regex line("^" + name + R"((\{[^}]*\})? ([0-9.eE+-]+)$)");
  std::istringstream in(text);
  std::string l;
  std::smatch m;
  double sum = 0;
  while (std::getline(in, l))
    if (std::regex_match(l, m, line)) sum += std::stod(m[2]);
  return sum;
}

// Every transfer of `id` went over rdma to `peer_role`: bytes > 0, no other backend, no failure.
// Returns the rdma bytes.
double require_all_rdma(const Cluster& cluster, const std::string& id, const std::string& peer_role) {
  const std::string text = cluster.scrape(id);
  const auto moved = transfers_of(text);
  INFO(id << " /metrics:\n" << text);
  for (const auto& [backend, roles] : moved) {
    if (backend == "rdma") continue;
    for (const auto& [role, mv] : roles) {
      INFO(id << " moved " << mv.bytes << " B in " << mv.jobs << " jobs over " << backend << " to " << role);
      CHECK(mv.jobs == 0);  // a silent fallback would show here
    }
  }
  REQUIRE(moved.count("rdma") == 1);
  REQUIRE(moved.at("rdma").count(peer_role) == 1);
  const Moved& mv = moved.at("rdma").at(peer_role);
  CHECK(mv.jobs > 0);
  CHECK(mv.bytes > 0);
  CHECK(counter_of(text, "epd_transfer_failures_total") == 0);
  std::printf("[rdma-e2e] %s: %.0f bytes in %.0f jobs over rdma to %s\n", id.c_str(), mv.bytes, mv.jobs,
              peer_role.c_str());
  std::fflush(stdout);
  return mv.bytes;
}

// Under qemu's TCG on a loaded 2-core host, five role processes take tens of seconds to start and can
// miss heartbeats for seconds: generous bounds, so only real failures fail.
ClusterSpec& for_the_vm(ClusterSpec& spec) {
  spec.backend = "rdma";
  spec.start_timeout_ms = 120000;
  spec.heartbeat_misses = std::max(spec.heartbeat_misses, 5000 / spec.heartbeat_ms);
  return spec;
}

// All roles forced onto rdma, /metrics on, embedding caches off (so every image's embeddings move).
ClusterSpec rdma_spec() {
  ClusterSpec spec;
  for_the_vm(spec);
  spec.metrics = true;
  spec.defaults["encoder"] = "embedding_cache_bytes = 0\n";
  spec.defaults["prefill"] = "embedding_cache_bytes = 0\n";
  return spec;
}

void stop_cleanly(Cluster& cluster) {
  const std::string reports = cluster.stop_and_collect_sanitizer_reports();
  INFO(reports);
  CHECK(reports.empty());
}

}  // namespace

TEST_CASE("rdma e2e: text and image requests give the reference tokens and every byte goes over verbs",
          "[vm]") {
  Cluster cluster(rdma_spec());
  cluster.start();
  LogDump dump{cluster, "rdma-e2e"};
  const auto cases = workload(8);
  REQUIRE(std::count_if(cases.begin(), cases.end(), [](const Case& c) { return c.image.has_value(); }) > 0);
  REQUIRE(std::count_if(cases.begin(), cases.end(), [](const Case& c) { return !c.image.has_value(); }) > 0);
  run_and_compare(cluster, 8, 4);
  require_all_rdma(cluster, "encoder-0", "prefill");  // embeddings
  require_all_rdma(cluster, "prefill-0", "decode");   // KV pages (and each room's aux record)
  CHECK(cluster.stats()["failed"] == 0);
  CHECK(cluster.stats()["retries"] == 0);
  stop_cleanly(cluster);
}

TEST_CASE("rdma e2e: fp32 decode with 64-token pages gets its KV staged over verbs", "[vm]") {
  ClusterSpec spec = rdma_spec();
  spec.defaults["decode"] = "kv_page_size = 64\nkv_dtype = \"f32\"\n";
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "rdma-e2e-staged"};
  const model::KvLayoutChoice kv{64, protocol::DType::f32, protocol::KvDimOrder::token_head_dim};
  run_and_compare(cluster, 6, 3, kv);
  // Every room went through decode's staging ring: its chunks were written over rdma.
  const json d = cluster.instance_when("decode-0", [](const json& i) {
    return i.contains("staging") && i["staging"]["chunks"] >= 6 && i["staging"]["ring_used"] == 0;
  });
  INFO(d.dump());
  REQUIRE(d.contains("staging"));
  CHECK(d["staging"]["chunks"].get<uint64_t>() >= 6);
  CHECK(d["staging"]["rejected"] == 0);
  require_all_rdma(cluster, "encoder-0", "prefill");
  require_all_rdma(cluster, "prefill-0", "decode");
  stop_cleanly(cluster);
}

TEST_CASE("rdma e2e: kill -9 one of two prefills under load, nothing is lost, the router retries elsewhere",
          "[vm]") {
  ClusterSpec spec = kill_spec();
  for_the_vm(spec);
  spec.metrics = true;
  spec.prefills = 2;
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "rdma-e2e-kill"};
  const pid_t victim = cluster.pid("prefill-1");
  const uint64_t old_incarnation = cluster.instance("prefill-1")["incarnation"].get<uint64_t>();
  const int n = 32;
  const Outcome o = run_load(cluster, n, 6, 6, [&] { REQUIRE(::kill(victim, SIGKILL) == 0); });
  const json stats = cluster.stats();
  report("rdma: kill -9 prefill-1, " + std::to_string(n) + " requests", o, stats, "rdma-e2e");
  CHECK(o.lost == 0);
  CHECK(o.wrong == 0);
  CHECK(o.completed + o.failed == n);
  CHECK(wait_reincarnated(cluster, "prefill-1", old_incarnation, 60000) >= 0);
  // The survivor carries on over rdma, and so does the restarted prefill.
  const Outcome after = run_load(cluster, 8, 4);
  report("rdma: after the restart, 8 requests", after, cluster.stats(), "rdma-e2e");
  CHECK(after.completed == 8);
  check_all_free(cluster);
  require_all_rdma(cluster, "prefill-0", "decode");
  stop_cleanly(cluster);
}

TEST_CASE(
    "rdma e2e: a frozen rdma writer's late writes are refused and counted, decode reuses the pages at "
    "once, no wrong token",
    "[vm]") {
  // As the tcp stale-writer fault test: prefill-1 holds every batch 8 s before its NIC writes, decode gives
  // the room up after 4 s (under TCG a healthy room's KV can take over 1.5 s) and, 300 ms later, revokes its
  // grant: the grant's memory registrations are gone, so decode frees the pages then instead of holding
  // them for prefill-1's answer. prefill-1's late writes find no live grant (or its kept rkeys are refused
  // by decode's device) and fail with `fenced`; decode counts them (fenced_writes).
  ClusterSpec spec;
  for_the_vm(spec);
  spec.prefills = 2;
  spec.max_attempts = 6;
  spec.defaults["decode"] = "waiting_timeout_ms = 4000\nabort_timeout_ms = 300\n";
  spec.instance_extra["decode-0"] = "kv_pages = 64\n";
  spec.instance_extra["prefill-1"] = "[instance.transport]\nfault_stall_us = 8000000\n";
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "rdma-e2e-stale-writer"};
  json d = json::object();
  for (int round = 1; round <= 3 && d.value("fenced_writes", 0) == 0; ++round) {
    const Outcome o = run_load(cluster, 8, 4);
    report("stale writer (rdma), round " + std::to_string(round) + ", 8 requests", o, cluster.stats(),
           "rdma-e2e");
    INFO(o.first_error);
    // Rooms that met prefill-1 are retried; under TCG some may run out of attempts and fail with their
    // cause. None may be lost or get another token.
    CHECK(o.wrong == 0);
    CHECK(o.lost == 0);
    CHECK(o.completed + o.failed == 8);
    // prefill-1's writes reach the link up to 8 s after they were submitted.
    d = cluster.instance_when(
        "decode-0", [](const json& i) { return i["fenced_writes"] > 0; }, 15000);
    if (d.is_null()) d = json::object();
  }
  std::printf("[rdma-e2e] stale writer (rdma): decode refused %lu late writes, held no pages for them\n",
              (unsigned long)d.value("fenced_writes", 0));
  CHECK(d.value("fenced_writes", 0) > 0);
  CHECK(count_lines(cluster.logs(), "decode: holding") == 0);  // nothing was held
  CHECK(count_lines(cluster.logs(), "fenced") > 0);            // prefill-1 heard why its writes failed
  check_all_free(cluster);
  stop_cleanly(cluster);
}

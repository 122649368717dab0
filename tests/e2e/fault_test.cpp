// Fault tests (issue 5): real role processes, faults injected through the transport's fault backend or by
// killing processes, requests through the router's HTTP API. Every request must end: 200 with exactly the
// colocated run's tokens, or an HTTP error that names its cause (counted) - never lost. Surviving
// instances must free every KV page and slot. Measured times are printed, not asserted (except decode's
// detection of a killed prefill, which the issue bounds by 2 heartbeat intervals).
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <map>
#include <regex>
#include <sstream>
#include <thread>

#include "cluster.hpp"
#include "epd/http/utf8.hpp"
#include "fault_seeds.hpp"
#include "load.hpp"
#include "openai_support.hpp"
#include "workload.hpp"

using namespace epd::testing;
using nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

uint64_t counter_sum(const json& instances, const char* key) {
  uint64_t sum = 0;
  for (const auto& i : instances) sum += i.value(key, uint64_t{0});
  return sum;
}

// Milliseconds since local midnight: the children's log lines carry local HH:MM:SS.mmm.
int64_t wall_ms_of_day() {
  const auto now = std::chrono::system_clock::now();
  const time_t t = std::chrono::system_clock::to_time_t(now);
  tm lt{};
  localtime_r(&t, &lt);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  return ((lt.tm_hour * 60 + lt.tm_min) * 60 + lt.tm_sec) * 1000 + ms;
}

// Time of day (ms) of the first log line of instance `id` matching `pattern`, or -1.
int64_t first_log_ms(const std::string& logs, const std::string& id, const std::string& pattern) {
  const std::regex line_re("^\\[" + id + "\\] (\\d\\d):(\\d\\d):(\\d\\d)\\.(\\d\\d\\d) .*" + pattern + ".*$");
  std::istringstream in(logs);
  std::string line;
  std::smatch m;
  while (std::getline(in, line))
    if (std::regex_match(line, m, line_re))
      return ((std::stoll(m[1]) * 60 + std::stoll(m[2])) * 60 + std::stoll(m[3])) * 1000 + std::stoll(m[4]);
  return -1;
}

struct KillReport {
  int64_t decode_detect_ms = -1;    // kill -> a surviving peer logs the victim dead
  int64_t registry_detect_ms = -1;  // kill -> the registry drops it
  int64_t recovered_ms = -1;        // kill -> the restarted instance is listed healthy again
};

// kill -9 `victim` once `trigger` of `n` requests are answered; the ProcessGroup restarts it.
KillReport kill_under_load(Cluster& cluster, const std::string& victim, const std::string& observer, int n,
                           int trigger, Outcome& out) {
  KillReport r;
  const uint64_t old_incarnation = cluster.instance(victim)["incarnation"].get<uint64_t>();
  const pid_t old_pid = cluster.pid(victim);
  int64_t kill_at = 0;
  clock_type::time_point kill_steady;
  std::thread recovery;
  out = run_load(cluster, n, 8, trigger, [&] {
    kill_at = wall_ms_of_day();
    kill_steady = clock_type::now();
    REQUIRE(::kill(old_pid, SIGKILL) == 0);
    recovery = std::thread([&] {
      const int64_t waited = wait_reincarnated(cluster, victim, old_incarnation);
      if (waited >= 0)
        r.recovered_ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - kill_steady).count();
    });
  });
  recovery.join();
  const std::string logs = cluster.logs();
  // Its own broken connection or the registry's PEERS, whichever reaches the observer first (on a loaded
  // machine the registry can win; the other is then old news and not logged).
  const int64_t seen = first_log_ms(logs, observer, "peer '" + victim + "' (.*is dead to us|left)");
  const int64_t dropped = first_log_ms(logs, "router", "registry: '" + victim + "' .*lost");
  if (seen >= 0) r.decode_detect_ms = seen - kill_at;
  if (dropped >= 0) r.registry_detect_ms = dropped - kill_at;
  CHECK(cluster.pid(victim) != old_pid);
  return r;
}

}  // namespace

TEST_CASE("fault 1: 5% of transfer writes fail, every request completes with the colocated tokens",
          "[fault][multiproc]") {
  ClusterSpec spec;
  spec.max_attempts = 4;
  for (const char* id : {"encoder-0", "prefill-0"})
    spec.instance_extra[id] = "[instance.transport]\nfault_error_rate = 0.05\nfault_seed = 11\n";
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "fault-1"};
  const Outcome o = run_load(cluster, 100, 8);
  const json stats = cluster.stats();
  report("1 (5% write errors, 100 requests)", o, stats);
  INFO(o.first_error);
  CHECK(o.completed == 100);
  CHECK(o.lost == 0);
  CHECK(o.wrong == 0);
  // The retries are visible: per instance (transfer level) and per cause (router level).
  const json inst = cluster.instances();
  std::printf("[fault] 1: transfer retries=%lu failures=%lu recycled sessions=%lu\n",
              (unsigned long)counter_sum(inst, "transfer_retries"),
              (unsigned long)counter_sum(inst, "transfer_failures"),
              (unsigned long)counter_sum(inst, "sessions_recycled"));
  CHECK(counter_sum(inst, "transfer_retries") > 0);
  uint64_t by_cause = 0;
  for (const auto& [cause, n] : stats["retry_causes"].items()) by_cause += n.get<uint64_t>();
  CHECK(stats["retries"].get<uint64_t>() == by_cause);
  check_all_free(cluster);
}

TEST_CASE("fault 2: a transfer worker that throws is restarted, its rooms fail, are retried and complete",
          "[fault][multiproc]") {
  ClusterSpec spec;
  // A room is retried after each crash; 8 attempts keep "every request completes" from depending on luck
  // (with 4, one request in a few hundred runs met a crash on every attempt).
  spec.max_attempts = 8;
  spec.prefills = 2;
  // prefill-0's workers throw after 60 ops per session (a few crashes over the run); prefill-1's after
  // 3 ops, with a budget of one restart per minute, so it spends the budget and reports itself unhealthy.
  spec.instance_extra["prefill-0"] =
      "worker_max_restarts = 50\n[instance.transport]\nfault_throw_after_ops = 60\n";
  spec.instance_extra["prefill-1"] =
      "worker_max_restarts = 1\n[instance.transport]\nfault_throw_after_ops = 3\n";
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "fault-2"};
  const pid_t p0 = cluster.pid("prefill-0"), p1 = cluster.pid("prefill-1");
  const Outcome first = run_load(cluster, 40, 8);
  report("2 (worker throws after N ops), first 40", first, cluster.stats());
  INFO(first.first_error);
  CHECK(first.completed == 40);
  CHECK(first.lost == 0);
  CHECK(first.wrong == 0);
  // The crashed rooms failed with the crash as their cause and were retried.
  const json stats = cluster.stats();
  CHECK(stats["retry_causes"].value("worker_crashed", 0) > 0);
  CHECK(count_lines(cluster.logs(), "transfer worker crashed: fault backend: injected worker crash") > 0);
  const json i0 = cluster.instance_when("prefill-0", [](const json& i) { return i["worker_restarts"] > 0; });
  const json i1 = cluster.instance_when("prefill-1", [](const json& i) { return i["healthy"] == false; });
  std::printf(
      "[fault] 2: prefill-0 worker restarts=%lu healthy=%d; prefill-1 worker restarts=%lu healthy=%d\n",
      (unsigned long)i0.value("worker_restarts", 0), int(i0["healthy"].get<bool>()),
      (unsigned long)i1.value("worker_restarts", 0), int(i1["healthy"].get<bool>()));
  CHECK(i0["worker_restarts"].get<uint64_t>() > 0);
  CHECK(i0["healthy"] == true);
  CHECK(i1["worker_restarts"].get<uint64_t>() == 1);
  CHECK(i1["healthy"] == false);  // budget spent: reported unhealthy, the router avoids it
  // The same processes keep serving.
  const Outcome later = run_load(cluster, 20, 4);
  report("2 (worker throws after N ops), later 20", later, cluster.stats());
  CHECK(later.completed == 20);
  CHECK(cluster.pid("prefill-0") == p0);
  CHECK(cluster.pid("prefill-1") == p1);
  check_all_free(cluster);
}

TEST_CASE("fault 3: an embedding write that fails twice fails its room with the cause, it is retried",
          "[fault][multiproc]") {
  // The first room's embedding write fails twice in a row (its retry too), deterministically.
  const uint64_t seed = seed_failing_first_job(0.05, 40);
  ClusterSpec spec;
  spec.instance_extra["encoder-0"] =
      "[instance.transport]\nfault_error_rate = 0.05\nfault_seed = " + std::to_string(seed) + "\n";
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "fault-3"};
  const pid_t encoder_pid = cluster.pid("encoder-0");
  const Outcome o = run_load(cluster, 40, 4);  // 20 of them carry an image
  const json stats = cluster.stats();
  report("3 (embedding write fails twice), 40 requests", o, stats);
  INFO(o.first_error);
  CHECK(o.completed == 40);
  CHECK(o.retried >= 1);
  CHECK(o.lost == 0);
  const std::string logs = cluster.logs();
  CHECK(count_lines(logs, "attempts=2 code=injected_fault") == 1);  // the room failed with the cause
  CHECK(stats["retry_causes"].value("injected_fault", 0) == 1);     // and the router retried it
  CHECK(cluster.pid("encoder-0") == encoder_pid);                   // the encoder kept serving
  check_all_free(cluster);
}

TEST_CASE("fault 4: kill -9 one of two prefills under load, nothing is lost, it restarts and serves",
          "[fault][multiproc]") {
  ClusterSpec spec = kill_spec();
  spec.prefills = 2;
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "fault-4"};
  Outcome o;
  const KillReport r = kill_under_load(cluster, "prefill-1", "decode-0", 200, 40, o);
  const json stats = cluster.stats();
  report("4 (kill -9 prefill-1, 200 requests)", o, stats);
  std::printf(
      "[fault] 4: decode noticed after %ld ms, registry dropped it after %ld ms, restarted and healthy "
      "after %ld ms (heartbeat interval %d ms)\n",
      long(r.decode_detect_ms), long(r.registry_detect_ms), long(r.recovered_ms), spec.heartbeat_ms);
  CHECK(o.lost == 0);
  CHECK(o.wrong == 0);
  CHECK(o.completed + o.failed == 200);
  CHECK(r.decode_detect_ms >= 0);
  CHECK(r.decode_detect_ms <= 2 * spec.heartbeat_ms);
  CHECK(r.recovered_ms >= 0);
  // The restarted instance serves again.
  const Outcome after = run_load(cluster, 30, 6);
  report("4 after the restart, 30 requests", after, cluster.stats());
  CHECK(after.completed == 30);
  check_all_free(cluster);
}

namespace {
// Scenario 5: kill -9 `victim` while 120 requests run; nothing is lost, the victim restarts and serves again.
void kill_scenario(const char* name, int decodes, const std::string& victim, const std::string& observer) {
  ClusterSpec spec = kill_spec();
  spec.decodes = decodes;
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, name};
  Outcome o;
  const KillReport r = kill_under_load(cluster, victim, observer, 120, 30, o);
  report(std::string(name) + " (kill -9 " + victim + ", 120 requests)", o, cluster.stats());
  std::printf(
      "[fault] %s: %s noticed after %ld ms, registry dropped it after %ld ms, restarted and healthy "
      "after %ld ms\n",
      name, observer.c_str(), long(r.decode_detect_ms), long(r.registry_detect_ms), long(r.recovered_ms));
  CHECK(o.lost == 0);
  CHECK(o.wrong == 0);
  CHECK(o.completed + o.failed == 120);
  CHECK(r.recovered_ms >= 0);
  const Outcome after = run_load(cluster, 20, 4);
  CHECK(after.completed == 20);
  check_all_free(cluster);
}
}  // namespace

TEST_CASE("fault 5a: kill -9 the encoder under load, nothing is lost, it restarts and serves",
          "[fault][multiproc]") {
  kill_scenario("5a", 1, "encoder-0", "prefill-0");
}

TEST_CASE("fault 5b: kill -9 one of two decodes under load, nothing is lost, it restarts and serves",
          "[fault][multiproc]") {
  kill_scenario("5b", 2, "decode-1", "prefill-0");
}

TEST_CASE("fault 7: kill -9 a decode under an n = 4 answer: its choices are retried alone, all four right",
          "[fault][multiproc]") {
  ClusterSpec spec;
  spec.decodes = 2;
  spec.defaults["decode"] = "step_delay_ms = 25\n";  // ~1 s per choice: time to kill a decode mid-answer
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "fault-7"};
  const std::string prompt = "Four answers, please";
  constexpr int kTokens = 40;
  Sampling sampling;
  sampling.temperature = 0.9;
  sampling.seed = 11;
  json body = sampling_body(sampling);
  // With logprobs: a resumed choice's tokens already streamed keep theirs, the rest are drawn (and their
  // logprobs computed) again, the first of them by the new prefill; all must equal epd-run's.
  body.update({{"prompt", prompt}, {"max_tokens", kTokens}, {"n", 4}, {"logprobs", 2}});
  std::pair<int, std::string> answer;
  std::jthread client([&] { answer = cluster.post_raw("/v1/completions", body.dump()); });
  // Once both decodes run choices of the answer (a choice may end early at the end token), kill the busier.
  std::string victim;
  for (int i = 0; i < 400 && victim.empty(); ++i) {
    std::map<std::string, int> rooms;
    for (const auto& inst : cluster.instances())
      if (inst.value("role", "") == "decode") rooms[inst.value("id", "")] = inst.value("active_rooms", 0);
    if (rooms.size() == 2 && rooms.begin()->second > 0 && rooms.rbegin()->second > 0)
      victim = rooms.begin()->second >= rooms.rbegin()->second ? rooms.begin()->first : rooms.rbegin()->first;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE_FALSE(victim.empty());
  REQUIRE(::kill(cluster.pid(victim), SIGKILL) == 0);
  client.join();
  INFO("killed " << victim << "; answer: " << answer.second);
  REQUIRE(answer.first == 200);
  const json j = json::parse(answer.second);
  REQUIRE(j["choices"].size() == 4);
  int retried = 0;
  for (int i = 0; i < 4; ++i) {
    Sampling s = sampling;
    s.seed = 11 + uint64_t(i);
    s.logprobs = 2;
    const Reference ref = reference(prompt, kTokens, "", s);
    std::string bytes;  // the tiny model's tokens are bytes, then its end token (257)
    for (int t : ref.tokens) {
      if (t == 257) break;
      if (t < 256) bytes += char(t);
    }
    CHECK(j["choices"][i]["text"] == epd::http::to_valid_utf8(bytes));
    const json& lp = j["choices"][i]["logprobs"];
    REQUIRE(lp["token_logprobs"].size() == ref.tokens.size());
    for (size_t t = 0; t < ref.tokens.size(); ++t) {
      INFO("choice " << i << " token " << t);
      CHECK(float(lp["token_logprobs"][t].get<double>()) == float(ref.logprobs[t]["logprob"].get<double>()));
      CHECK(lp["top_logprobs"][t].size() >= 1);
    }
    retried += j["epd"]["choices"][i]["attempts"].get<int>() > 1;
  }
  CHECK(retried >= 1);  // the killed decode held at least one choice...
  CHECK(retried <= 3);  // ...and the others went on where they were
}

TEST_CASE("fault 6: a peer restarted with a new incarnation is detected, its stale sessions are not reused",
          "[fault][multiproc]") {
  ClusterSpec spec = kill_spec();
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "fault-7"};
  const Outcome before =
      run_load(cluster, 10, 2);  // prefill and encoder now hold sessions to the old incarnations
  CHECK(before.completed == 10);
  const json old_decode = cluster.instance("decode-0");
  const uint64_t old_incarnation = old_decode["incarnation"].get<uint64_t>();
  const json prefill_before = cluster.instance("prefill-0");
  REQUIRE(::kill(cluster.pid("decode-0"), SIGKILL) == 0);
  const int64_t waited = wait_reincarnated(cluster, "decode-0", old_incarnation);
  REQUIRE(waited >= 0);
  std::printf("[fault] 6: decode-0 restarted with a new incarnation, listed healthy after %ld ms\n",
              long(waited));
  // Every request after the restart succeeds on its first attempt: a session to the old incarnation
  // (its shared memory is gone) would have failed or corrupted them.
  const Outcome after = run_load(cluster, 20, 4);
  report("6 (after decode-0 restarted), 20 requests", after, cluster.stats());
  CHECK(after.completed == 20);
  CHECK(after.retried == 0);
  const json prefill_after = cluster.instance("prefill-0");
  CHECK(prefill_after["transfer_retries"] == prefill_before["transfer_retries"]);
  CHECK(prefill_after["transfer_failures"] == prefill_before["transfer_failures"]);
  const std::string logs = cluster.logs();
  // Whichever comes first — its broken connection, or the registry's PEERS (dropping it, or listing the new
  // incarnation) — tells prefill that the old incarnation is gone (the rest is then old news, not logged).
  const std::string inc = std::to_string(old_incarnation);
  CHECK(first_log_ms(logs, "prefill-0",
                     "peer 'decode-0' (\\(incarnation " + inc +
                         "\\) is dead to us|restarted \\(incarnation " + inc + " ->|left)") >= 0);
  CHECK(first_log_ms(logs, "prefill-0", "(forgetting|dropping) session #\\d+ to 'decode-0'") >= 0);
  check_all_free(cluster);
}

// ---- Issue 11: stalls, root causes, stale writers ----

namespace {

// SIGSTOP `victim` for `stall` while requests flow, SIGCONT, and wait until it is listed healthy as a new
// incarnation of the same process. Every request is answered; the next 20 succeed and use the victim.
void stall_scenario(Cluster& cluster, const std::string& victim, const char* role, int stall_ms) {
  const uint64_t old_incarnation = cluster.instance(victim)["incarnation"].get<uint64_t>();
  const pid_t pid = cluster.pid(victim);
  int64_t rejoined_ms = -1;
  const Outcome o = run_load(cluster, 160, 4, 10, [&] {
    REQUIRE(::kill(pid, SIGSTOP) == 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(stall_ms));
    REQUIRE(::kill(pid, SIGCONT) == 0);
    rejoined_ms = wait_reincarnated(cluster, victim, old_incarnation, 20000);
  });
  const std::string name = "stall " + victim + " " + std::to_string(stall_ms) + " ms";
  report(name, o, cluster.stats());
  std::printf("[fault] %s: listed healthy as a new incarnation %ld ms after SIGCONT\n", name.c_str(),
              long(rejoined_ms));
  INFO(o.first_error);
  CHECK(o.lost == 0);
  CHECK(o.wrong == 0);
  CHECK(o.completed + o.failed == 160);
  REQUIRE(rejoined_ms >= 0);
  CHECK(cluster.pid(victim) == pid);  // the same process rejoined; nothing restarted it
  // It serves again: the next 20 requests all succeed, and those that need its role go through it.
  const auto cases = workload(20);
  int on_victim = 0;
  for (const auto& c : cases) {
    const auto [status, body] = cluster.generate(request_of(c));
    INFO(body.dump());
    REQUIRE(status == 200);
    CHECK(body["tokens"].get<std::vector<uint32_t>>() == oracle(c));
    if (body["instances"][role] == victim) ++on_victim;
  }
  CHECK(on_victim >= 10);  // every one of them needs it (the encoder: the half with an image)
}

ClusterSpec stall_spec() {
  ClusterSpec spec;
  // The registry expires a silent member after 1 s: a 3 s or 8 s stall always outlives it.
  spec.heartbeat_ms = 100;
  spec.heartbeat_misses = 10;
  spec.max_attempts = 4;
  spec.defaults["prefill"] = "bootstrap_timeout_ms = 3000\n";
  spec.defaults["decode"] = "abort_timeout_ms = 500\n";
  return spec;
}

void stall_test(const std::string& victim, const char* role, const std::string& backend = "auto") {
  ClusterSpec spec = stall_spec();
  spec.backend = backend;
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "stall-" + victim + "-" + backend};
  stall_scenario(cluster, victim, role, 3000);
  stall_scenario(cluster, victim, role, 8000);
  CHECK(first_log_ms(cluster.logs(), victim, "membership: rejoining as incarnation") >= 0);
  check_all_free(cluster);
  CHECK(cluster.stop_and_collect_sanitizer_reports().empty());  // role processes, with EPD_SANITIZE
}

}  // namespace

TEST_CASE("stall: an encoder frozen for 3 s and 8 s rejoins as a new incarnation and serves again",
          "[fault][stall][multiproc]") {
  stall_test("encoder-0", "encoder");
}

TEST_CASE("stall: a prefill frozen for 3 s and 8 s rejoins as a new incarnation and serves again",
          "[fault][stall][multiproc]") {
  stall_test("prefill-0", "prefill");
}

TEST_CASE("stall: a decode frozen for 3 s and 8 s rejoins as a new incarnation and serves again",
          "[fault][stall][multiproc]") {
  stall_test("decode-0", "decode");
}

// Over tcp the frozen prefill's writes, if any were on their way, meet revoked grants at decode.
TEST_CASE("stall: a prefill frozen mid-transfer over tcp rejoins, no late write reaches reused pages",
          "[fault][stall][multiproc]") {
  stall_test("prefill-0", "prefill", "tcp");
}

// The encoder's report that a room "already ended" at prefill is a consequence; the router must see the
// root cause (here prefill's waiting_timeout, retryable) whichever report reaches it first.
TEST_CASE("root cause: a consequential failure carries the root cause, in either order of the reports",
          "[fault][multiproc]") {
  for (const bool encoder_first : {true, false}) {
    ClusterSpec spec;
    spec.max_attempts = 3;
    // Prefill gives up on the embeddings after 200 ms; the encoder starts encoding only after 400 ms, so
    // its EMBED_META meets a room that already failed. With prefill's own report held for 1.5 s, the
    // encoder's report reaches the router first.
    spec.defaults["prefill"] =
        std::string("bootstrap_timeout_ms = 200\n") + (encoder_first ? "report_delay_ms = 1500\n" : "");
    spec.defaults["encoder"] = "encode_delay_ms = 400\n";
    Cluster cluster(spec);
    cluster.start();
    LogDump dump{cluster, encoder_first ? "root-cause-encoder-first" : "root-cause-prefill-first"};
    const auto cases = workload(2);
    REQUIRE(cases[1].image);  // odd cases carry an image
    const auto [status, body] = cluster.generate(request_of(cases[1]));
    INFO(body.dump(-1, ' ', false, json::error_handler_t::replace));
    // Retried up to the limit, then answered with the root cause, never a final "aborted".
    CHECK(status == 504);
    CHECK(body["error"]["code"] == "waiting_timeout");
    CHECK(body["error"]["message"].get<std::string>().find("did not arrive within 200 ms") !=
          std::string::npos);
    const json stats = cluster.stats();
    CHECK(stats["retries"] == 2);  // three attempts
    CHECK(stats["retry_causes"].value("waiting_timeout", 0) == 2);
    CHECK(stats["failure_causes"].value("aborted", 0) == 0);
    if (encoder_first)  // the router heard the encoder's consequence report first
      CHECK(first_log_ms(cluster.logs(), "router",
                         "failed \\(waiting_timeout \\(retryable\\): 'encoder-0': prefill") >= 0);
    check_all_free(cluster);
  }
}

namespace {
// prefill-1's writes reach decode 4 s late (a writer frozen mid-transfer); decode gives its rooms up after
// 1.5 s (prefill has dispatched its writes by then even on a loaded box, so they are in flight when the
// ABORT comes) and aborts them after 300 ms more; requests keep flowing
// through prefill-0, so the pages are reused while prefill-1's writes are still on their way.
ClusterSpec stale_writer_spec(const std::string& backend) {
  ClusterSpec spec;
  spec.backend = backend;
  spec.prefills = 2;
  spec.max_attempts = 6;
  spec.defaults["decode"] = "waiting_timeout_ms = 1500\nabort_timeout_ms = 300\n";
  spec.instance_extra["decode-0"] = "kv_pages = 64\n";  // pages are reused quickly
  spec.instance_extra["prefill-1"] = "[instance.transport]\nfault_stall_us = 4000000\n";
  return spec;
}
}  // namespace

TEST_CASE("stale writer over tcp: late writes into reused pages are refused and counted, no wrong token",
          "[fault][multiproc]") {
  Cluster cluster(stale_writer_spec("tcp"));
  cluster.start();
  LogDump dump{cluster, "stale-writer-tcp"};
  // As for shm below: up to three rounds until a late write has met a revoked grant.
  json d = json::object();
  for (int round = 1; round <= 3 && d.value("fenced_writes", 0) == 0; ++round) {
    const Outcome o = run_load(cluster, 40, 4);
    report("stale writer (tcp), round " + std::to_string(round) + ", 40 requests", o, cluster.stats());
    INFO(o.first_error);
    CHECK(o.wrong == 0);
    CHECK(o.lost == 0);
    CHECK(o.completed == 40);  // every room that met prefill-1 was retried on prefill-0
    // The late writes arrive after their grant was revoked: refused at decode's receiver and counted.
    d = cluster.instance_when(
        "decode-0", [](const json& i) { return i["fenced_writes"] > 0; }, 6000);
    if (d.is_null()) d = json::object();  // not listed at all: no figures yet
  }
  std::printf("[fault] stale writer (tcp): decode refused %lu late writes\n",
              (unsigned long)d.value("fenced_writes", 0));
  CHECK(d["fenced_writes"].get<uint64_t>() > 0);
  CHECK(count_lines(cluster.logs(), "fenced") > 0);  // prefill-1 heard why its writes failed
  check_all_free(cluster);
  CHECK(cluster.stop_and_collect_sanitizer_reports().empty());  // role processes, with EPD_SANITIZE
}

TEST_CASE("stale writer over shm: pages a frozen writer could still map are held until it answers",
          "[fault][multiproc]") {
  Cluster cluster(stale_writer_spec("shm"));
  cluster.start();
  LogDump dump{cluster, "stale-writer-shm"};
  // A round exercises the hold only if a room met prefill-1 and its write was dispatched before decode
  // gave it up, which a starved machine can miss: up to three rounds until a hold is seen.
  uint64_t held_max = 0;
  for (int round = 1; round <= 3 && held_max == 0; ++round) {
    std::atomic<bool> done{false};
    std::thread watch([&] {
      while (!done.load()) {
        const json d = cluster.instance("decode-0");
        if (!d.is_null()) held_max = std::max(held_max, d.value("quarantined_pages", uint64_t{0}));
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    });
    const Outcome o = run_load(cluster, 40, 4);
    done = true;
    watch.join();
    report("stale writer (shm), round " + std::to_string(round) + ", 40 requests", o, cluster.stats());
    INFO(o.first_error);
    CHECK(o.wrong == 0);
    CHECK(o.lost == 0);
    CHECK(o.completed == 40);
  }
  std::printf("[fault] stale writer (shm): decode held up to %lu pages for a writer that could still write\n",
              (unsigned long)held_max);
  CHECK(held_max > 0);  // held past the abort timeout instead of being reused
  CHECK(first_log_ms(cluster.logs(), "decode-0", "holding \\d+ page\\(s\\) of aborted room") >= 0);
  // Released once prefill-1's late writes ended and it acknowledged.
  check_all_free(cluster);
  // No sanitizer report from a role process (with EPD_SANITIZE).
  CHECK(cluster.stop_and_collect_sanitizer_reports().empty());
}

// Deadlines are end to end (docs/failure-handling.md, "Deadlines"): with decode's and the encoder's own
// timers at 1 s and a slow prefill (400 ms per chunk, one room at a time) taking 8 requests at once, the
// last ones wait seconds at prefill before it starts them, and each must still complete on its first
// attempt: a room queued at another role is late, not failed. (Before, decode gave up on KV 1 s after
// SUBMIT and the router retried.)
TEST_CASE(
    "deadlines: rooms queued at prefill longer than decode's own timeout complete on their first attempt",
    "[fault][multiproc]") {
  ClusterSpec spec;
  // One room per pass (batch_tokens 1): the rooms queue behind each other at prefill.
  spec.defaults["prefill"] = "chunk_delay_ms = 400\nbatch_tokens = 1\n";
  spec.defaults["decode"] = "waiting_timeout_ms = 1000\n";
  spec.defaults["encoder"] = "waiting_timeout_ms = 1000\n";
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, "deadlines"};
  const Outcome o = run_load(cluster, 16, 8);  // half of them carry an image
  const json stats = cluster.stats();
  report("deadlines (prefill 400 ms per chunk, decode and encoder timers 1 s), 16 requests 8 at once", o,
         stats);
  INFO(o.first_error);
  // The premise: some answer's first token came after more than the role timers (the 8th room at once
  // waits for 7 rooms of at least one 400 ms chunk each).
  REQUIRE_FALSE(o.first_token_ms.empty());
  CHECK(*std::max_element(o.first_token_ms.begin(), o.first_token_ms.end()) > 1000);
  CHECK(o.completed == 16);
  CHECK(o.retried == 0);
  CHECK(stats["retries"] == 0);
  CHECK(o.lost == 0);
  check_all_free(cluster);
}

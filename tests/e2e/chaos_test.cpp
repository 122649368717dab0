// Chaos test (issue 11, defect 5): the kill tests of fault_test.cpp kill once; this one keeps 8 clients busy
// for ~20 s on a 2x2 cluster (2 encoders, 2 prefills, 2 decodes) while a random non-router instance is
// kill -9'd every few seconds and restarted by the ProcessGroup, as epd-cluster does. Seeded
// (EPD_CHAOS_SEED, default below; EPD_CHAOS_SECONDS sets the load time): the seed and the kill schedule
// are printed, so a failing run can be repeated.
//
// Pass: every request is answered - with the colocated run's tokens, or with a clear error after retries -
// and both are counted; 0 wrong tokens; 0 lost (no answer, or an error without code and message); 0 hung
// clients; every page and slot free at the end; every instance listed healthy again.
//
// Which errors are "clear errors after retries": a retryable code reaching the client (the router only
// answers with one when max_attempts are used up), or 503 unknown_peer "no healthy <role> instance" (the
// router waited unavailable_wait_ms for a restarted instance). Anything else - a non-retryable code such
// as `aborted` for a room that failed because a peer died, or the router's own request timeout - means a
// retryable failure was not retried or a room hung, and fails the test.
//
// The same drill runs on a Q4_K_M checkpoint (llama.cpp's kernels, whose bits depend on how a prompt is
// chunked) with both prefix caches busy: conversations that grow turn by turn and prompts sent again, over
// shm, tcp and staged decode pages; its kills stop well before the load does, so answers keep coming from
// caches that restarted instances rebuilt. Each answer must be the colocated run's (issue 65: one answer
// after such a drill was not, on its first attempt, 52 s after the last kill).
//
// How many clear errors are acceptable: the kills are the only faults here, so every one must be answered
// within kAttributionMs of a kill (detection takes at most heartbeat x misses = 1 s, a missing role is waited
// for 5 s) - a failure away from every kill fails the test - and a kill may cost at most the requests the 8
// clients have in flight, so failed <= 8 x kills. Today one kill of a prefill can exhaust every attempt of
// the requests in flight within milliseconds (the router re-places them before it sees the death itself);
// those are counted and printed with their answer times.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cluster.hpp"
#include "epd/model/generate.hpp"
#include "epd/model/llama.hpp"
#include "epd/model/prompt_codec.hpp"
#include "epd/protocol/errors.hpp"
#include "llama_checkpoint.hpp"
#include "load.hpp"
#include "workload.hpp"

using namespace epd::testing;
using nlohmann::json;
using clock_type = std::chrono::steady_clock;

namespace {

constexpr uint64_t kDefaultSeed = 11;
constexpr int kClients = 8;
constexpr int64_t kAttributionMs = 6000;

uint64_t env_or(const char* name, uint64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoull(v, nullptr, 10) : fallback;
}

int64_t ms_since(clock_type::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
}

// One request of the pool and the colocated run's answer to it.
struct ChaosCase {
  json request;
  std::vector<uint32_t> expected;
};

// A fixed pool the clients cycle through: prompts from a few bytes to several 64-token prefill chunks, an
// image (1 to 16 patches) on every third request, 4 to 19 generated tokens.
std::vector<ChaosCase> reference_cases() {
  static const size_t lengths[] = {6, 40, 150, 420};
  std::vector<ChaosCase> out;
  for (int i = 0; i < 48; ++i) {
    Case c;
    c.prompt = "chaos " + std::to_string(i) + ": " +
               std::string(lengths[i % 4] + size_t(7 * i % 23), char('a' + i % 26));
    if (i % 3 == 0) c.image = epd::model::make_test_image(8 + 8 * (i % 4), 8 + 8 * (i / 4 % 4), uint64_t(i));
    c.max_tokens = 4 + uint32_t(i * 5 % 16);
    out.push_back({request_of(c), oracle(c)});  // the oracle before the clock matters
  }
  return out;
}

// A Q4_K_M checkpoint of hidden 256 (Q4_K and Q6_K matrices, repacked for ggml's GEMM where this CPU has it),
// written by llama.cpp's quantizer for the test; EPD_CHAOS_MODEL names another GGUF to drill instead (e.g.
// `epd-bench model --make-checkpoint DIR --shape smollm2-135m --file-type q4_k_m`'s).
struct QuantizedCheckpoint {
  QuantizedCheckpoint() {
    if (const char* other = std::getenv("EPD_CHAOS_MODEL"); other && *other) {
      gguf = other;
      return;
    }
    dir = std::filesystem::temp_directory_path() / ("epd-chaos-q4km-" + std::to_string(::getpid()));
    epd::model::testing::CheckpointSpec s;
    s.d_model = 256;
    s.ffn = 512;
    s.layers = 4;
    s.write_hf = false;
    s.gguf_file_type = "q4_k_m";
    auto p = epd::model::testing::write_llama_checkpoint(s, dir);
    REQUIRE(p.ok());
    gguf = p->gguf;
  }
  ~QuantizedCheckpoint() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
  std::filesystem::path dir;
  std::string gguf;
};

// The pool for the checkpoint, by token ids: 12 conversations of 4 turns, each turn the last one's prompt
// plus the colocated answer plus a new message (5 to 300 tokens), so both prefix caches hold pages that
// later prompts start with, partial pages and answers included; the clients cycle through it, so every
// prompt is also sent again. 8 to 32 generated tokens; the oracle is the colocated run with the roles'
// chunking (64) and, for staged decode pages, `decode_kv`.
std::vector<ChaosCase> checkpoint_cases(const std::string& path,
                                        const std::optional<epd::model::KvLayoutChoice>& decode_kv) {
  auto cfg = epd::model::load_model_path(path);
  REQUIRE(cfg.ok());
  auto runner = epd::model::make_runner(*cfg);
  REQUIRE(runner.ok());
  auto codec = epd::model::PromptCodec::for_model(*cfg);
  REQUIRE(codec.ok());
  std::vector<ChaosCase> out;
  for (uint32_t conv = 0; conv < 12; ++conv) {
    std::vector<uint32_t> prompt;
    for (uint32_t turn = 0; turn < 4; ++turn) {
      const uint32_t message = 5 + (conv * 37 + turn * 61) % 70 + (turn == 0 ? (conv % 3) * 90 : 0);
      for (uint32_t k = 0; k < message; ++k) prompt.push_back(3 + (k * 53 + conv * 101 + turn * 7) % 380);
      epd::model::GenerateOptions opts;
      opts.max_tokens = 8 + (conv * 5 + turn * 3) % 25;
      opts.chunk = 64;  // the prefill role's default chunk_tokens
      opts.decode_kv = decode_kv;
      opts.stop_tokens.assign((*codec)->stop_tokens().begin(), (*codec)->stop_tokens().end());
      auto r = epd::model::generate_tokens(**runner, prompt, opts);
      REQUIRE(r.ok());
      out.push_back({json{{"prompt_tokens", prompt}, {"max_tokens", opts.max_tokens}}, r->tokens});
      prompt.insert(prompt.end(), r->tokens.begin(), r->tokens.end());
    }
  }
  // Interleave the conversations: a turn follows its previous one after other conversations' turns.
  std::vector<ChaosCase> interleaved;
  for (uint32_t turn = 0; turn < 4; ++turn)
    for (uint32_t conv = 0; conv < 12; ++conv) interleaved.push_back(out[conv * 4 + turn]);
  return interleaved;
}

struct Kill {
  int64_t at_ms;  // after the load started
  std::string victim;
};

// A kill every 2 to 3.5 s from 1.5 s until `kills_until_ms`, each of a random non-router instance other than
// the previous victim (it may still be restarting), at most 3 per instance (the ProcessGroup gives up after
// 5 a minute).
std::vector<Kill> kill_schedule(std::mt19937_64& rng, const std::vector<std::string>& ids,
                                int64_t kills_until_ms) {
  std::vector<Kill> out;
  std::map<std::string, int> kills;
  std::uniform_int_distribution<int64_t> gap(2000, 3500);
  for (int64_t t = 1500; t < kills_until_ms; t += gap(rng)) {
    std::vector<std::string> candidates;
    for (const auto& id : ids)
      if (kills[id] < 3 && (out.empty() || out.back().victim != id)) candidates.push_back(id);
    const std::string victim =
        candidates[std::uniform_int_distribution<size_t>(0, candidates.size() - 1)(rng)];
    ++kills[victim];
    out.push_back({t, victim});
  }
  return out;
}

struct Answer {
  size_t case_index = 0;
  int status = 0;
  json body;
  int64_t sent_ms = 0;  // after the load started
  int64_t took_ms = 0;
};

// A clear error after retries (see the top of the file).
bool final_after_retries(const json& body) {
  const std::string code = body["error"].value("code", "");
  const std::string message = body["error"].value("message", "");
  if (code == "unknown_peer") return message.rfind("no healthy ", 0) == 0;
  if (code == "timeout" && message.rfind("no answer within ", 0) == 0) return false;  // the request hung
  const auto* info = std::find_if(epd::protocol::error_table_begin(), epd::protocol::error_table_end(),
                                  [&](const epd::protocol::ErrorInfo& e) { return e.name == code; });
  return info != epd::protocol::error_table_end() && info->retryable;
}

// The router's "request N failed after K attempt(s): ..." lines.
std::vector<std::string> router_failure_lines(const std::string& logs) {
  std::vector<std::string> out;
  std::istringstream in(logs);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("[router]", 0) == 0 && line.find("router: request ") != std::string::npos &&
        line.find(" failed after ") != std::string::npos)
      out.push_back(line);
  return out;
}

}  // namespace

// The drill: `spec` started with 2 encoders, 2 prefills and 2 decodes, 8 clients cycling through `cases`
// for `load_ms`, kills until `kills_until_ms`, then every check of the top of the file.
// `kill_encoders` false: only prefills and decodes are victims (a text model's encoders have no work).
void run_chaos(ClusterSpec spec, const std::string& name, const std::vector<ChaosCase>& cases,
               int64_t load_ms, int64_t kills_until_ms, bool kill_encoders = true) {
  const uint64_t seed = env_or("EPD_CHAOS_SEED", kDefaultSeed);
  spec.encoders = 2;
  spec.prefills = 2;
  spec.decodes = 2;
  Cluster cluster(spec);
  cluster.start();
  LogDump dump{cluster, name + "-" + std::to_string(seed)};

  std::vector<std::string> victims;
  for (const auto& id : cluster.ids())
    if (id != "router" && (kill_encoders || id.rfind("encoder", 0) != 0)) victims.push_back(id);
  std::mt19937_64 rng(seed);
  const std::vector<Kill> schedule = kill_schedule(rng, victims, kills_until_ms);
  std::ostringstream plan;
  for (const auto& k : schedule) plan << " " << k.at_ms << "ms:" << k.victim;
  std::printf("[chaos] %s: seed=%lu (EPD_CHAOS_SEED) load=%ld ms clients=%d kills:%s\n", name.c_str(),
              (unsigned long)seed, long(load_ms), kClients, plan.str().c_str());
  std::fflush(stdout);

  // Clients: each sends the next case of the pool until the load time is over.
  const auto t0 = clock_type::now();
  std::atomic<size_t> next{0};
  std::vector<std::vector<Answer>> answers(kClients);
  std::vector<std::atomic<int64_t>> busy_since(kClients);  // -1: not in a request
  std::atomic<int> finished{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < kClients; ++t) {
    busy_since[t] = -1;
    clients.emplace_back([&, t] {
      while (ms_since(t0) < load_ms) {
        Answer a;
        a.case_index = next++ % cases.size();
        a.sent_ms = ms_since(t0);
        busy_since[t] = a.sent_ms;
        auto [status, body] = cluster.generate(cases[a.case_index].request);
        a.status = status;
        a.body = std::move(body);
        a.took_ms = ms_since(t0) - a.sent_ms;
        busy_since[t] = -1;
        answers[t].push_back(std::move(a));
      }
      ++finished;
    });
  }

  // The kills, on this thread; a watcher per kill measures until the victim is back (new incarnation).
  std::map<std::string, pid_t> killed;  // victim -> its first pid
  std::vector<int64_t> kill_ms;         // when each kill was done (after the load started)
  std::vector<std::thread> watchers;
  std::vector<int64_t> recovered_ms(schedule.size(), -1);
  for (size_t k = 0; k < schedule.size(); ++k) {
    const std::string victim = schedule[k].victim;
    std::this_thread::sleep_until(t0 + std::chrono::milliseconds(schedule[k].at_ms));
    const json before = cluster.instance_when(victim, [](const json& i) { return i["healthy"] == true; });
    const pid_t pid = cluster.pid(victim);
    if (!before.is_object() || before["healthy"] != true || pid <= 0) {
      std::printf("[chaos] %ld ms: %s is not back yet; this kill is skipped\n", long(ms_since(t0)),
                  victim.c_str());
      continue;
    }
    const uint64_t incarnation = before["incarnation"].get<uint64_t>();
    const auto kill_time = clock_type::now();
    const int64_t at = ms_since(t0);
    if (::kill(pid, SIGKILL) != 0) {  // no REQUIRE here: the clients are still running
      FAIL_CHECK("kill -9 " << victim << " (pid " << pid << ") failed");
      continue;
    }
    kill_ms.push_back(at);
    killed.emplace(victim, pid);
    std::printf("[chaos] %ld ms: kill -9 %s (pid %d, incarnation %lu)\n", long(at), victim.c_str(), int(pid),
                (unsigned long)incarnation);
    std::fflush(stdout);
    watchers.emplace_back([&, k, victim, incarnation, kill_time] {
      if (wait_reincarnated(cluster, victim, incarnation, 20000) >= 0)
        recovered_ms[k] =
            std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - kill_time).count();
    });
  }

  // Every client must be answered within the router's bound (request_timeout_ms) after the load ends.
  const auto answer_deadline = t0 + std::chrono::milliseconds(load_ms + spec.request_timeout_ms + 5000);
  while (finished.load() < kClients && clock_type::now() < answer_deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  int hung = 0;
  for (int t = 0; t < kClients; ++t)
    if (const int64_t since = busy_since[t].load(); since >= 0) {
      ++hung;
      std::printf("[chaos] client %d hung: its request sent at %ld ms is unanswered\n", t, long(since));
    }
  for (auto& w : watchers) w.join();
  if (hung > 0) cluster.stop();  // the clients' connections drop and they return
  for (auto& c : clients) c.join();
  REQUIRE(hung == 0);

  const int kills = int(kill_ms.size());
  Outcome o;
  int unexpected = 0;    // failures that are not a clear error after retries
  int unattributed = 0;  // failures answered away from every kill
  std::vector<int> failures_per_kill(kill_ms.size(), 0);
  int64_t slowest = 0;
  size_t requests = 0;
  for (const auto& per_client : answers)
    for (const auto& a : per_client) {
      ++requests;
      slowest = std::max(slowest, a.took_ms);
      const int wrong_before = o.wrong, lost_before = o.lost, failed_before = o.failed;
      o.add(cases[a.case_index].expected, a.status, a.body);
      if (o.wrong != wrong_before || o.lost != lost_before)
        std::printf("[chaos] %s: case %zu sent at %ld ms: %d %s\n",
                    o.wrong != wrong_before ? "WRONG" : "LOST", a.case_index, long(a.sent_ms), a.status,
                    a.body.dump().substr(0, 300).c_str());
      if (o.failed != failed_before) {
        const bool ok = final_after_retries(a.body);
        if (!ok) ++unexpected;
        // The last kill before the answer.
        const int64_t answered = a.sent_ms + a.took_ms;
        const auto after = std::upper_bound(kill_ms.begin(), kill_ms.end(), answered);
        const bool near = after != kill_ms.begin() && answered - *std::prev(after) <= kAttributionMs;
        if (near)
          ++failures_per_kill[size_t(std::prev(after) - kill_ms.begin())];
        else
          ++unattributed;
        std::printf("[chaos] failure (%s%s): case %zu sent at %ld ms, answered after %ld ms: %d %s\n",
                    ok ? "after retries" : "NOT a clear error after retries",
                    near ? "" : ", away from every kill", a.case_index, long(a.sent_ms), long(a.took_ms),
                    a.status, a.body.dump().c_str());
      }
    }
  const json stats = cluster.stats();
  report(name + ", seed " + std::to_string(seed) + ", " + std::to_string(kills) + " kills, " +
             std::to_string(requests) + " requests",
         o, stats, "chaos");
  std::ostringstream recovery, per_kill;
  for (size_t k = 0; k < schedule.size(); ++k)
    recovery << " " << schedule[k].victim << "=" << recovered_ms[k];
  for (int f : failures_per_kill) per_kill << " " << f;
  std::printf(
      "[chaos] hung=%d not-after-retries=%d away-from-kills=%d failures per kill:%s; slowest answer=%ld ms; "
      "back after kill (ms):%s\n",
      hung, unexpected, unattributed, per_kill.str().c_str(), long(slowest), recovery.str().c_str());
  for (const auto& line : router_failure_lines(cluster.logs())) std::printf("[chaos] %s\n", line.c_str());
  std::fflush(stdout);

  INFO("seed " << seed << " (repeat with EPD_CHAOS_SEED=" << seed << "); first error: " << o.first_error);
  CHECK(o.wrong == 0);
  CHECK(o.lost == 0);
  CHECK(o.completed + o.failed == int(requests));
  CHECK(unexpected == 0);
  CHECK(unattributed == 0);
  CHECK(o.failed <= kClients * kills);
  CHECK(kills + 1 >= int(schedule.size()));  // the chaos happened
  CHECK(stats.value("retries", 0) > 0);      // and met requests in flight

  // Every instance is back: listed, healthy, the victims with a new process.
  for (const auto& id : cluster.ids()) {
    const json i = cluster.instance_when(
        id, [](const json& e) { return e["healthy"] == true; }, 20000);
    INFO(id << ": " << i.dump());
    CHECK(i.is_object());
    CHECK(i.value("healthy", false));
  }
  for (const auto& [victim, pid] : killed) CHECK(cluster.pid(victim) != pid);
  check_all_free(cluster);
  CHECK(cluster.stop_and_collect_sanitizer_reports().empty());
}

TEST_CASE("chaos: 8 busy clients on a 2x2 cluster, a random instance kill -9'd every few seconds",
          "[chaos][multiproc]") {
  const int64_t load_ms = int64_t(env_or("EPD_CHAOS_SECONDS", 20)) * 1000;
  run_chaos(kill_spec(), "chaos", reference_cases(), load_ms, load_ms - 1000);
}

// The drill on the Q4_K_M checkpoint, both prefix caches on (their defaults): kills for 12 s, then 10 s of
// load on what the restarted instances cached since. Over shm, over tcp, and with decode pages of another
// size (the staged path, K/V in f16 on both sides, the roles' default: docs/caches.md says why a resumed
// answer needs one element type).
TEST_CASE("chaos on a Q4_K_M checkpoint with both prefix caches: every answer is the colocated run's",
          "[chaos][multiproc]") {
  QuantizedCheckpoint ck;
  const int64_t load_ms = int64_t(env_or("EPD_CHAOS_SECONDS", 22)) * 1000;
  const int64_t kills_until_ms = std::min<int64_t>(12000, load_ms - 1000);
  ClusterSpec spec = kill_spec();
  spec.model_path = ck.gguf;
  SECTION("shm") {
    spec.backend = "shm";
    run_chaos(spec, "chaos-q4km-shm", checkpoint_cases(ck.gguf, std::nullopt), load_ms, kills_until_ms,
              false);
  }
  SECTION("tcp") {
    spec.backend = "tcp";
    run_chaos(spec, "chaos-q4km-tcp", checkpoint_cases(ck.gguf, std::nullopt), load_ms, kills_until_ms,
              false);
  }
  SECTION("staged decode pages") {
    spec.backend = "shm";
    spec.defaults["decode"] = "kv_page_size = 32\n";
    const epd::model::KvLayoutChoice kv{32, epd::model::DType::f16, epd::model::KvDimOrder::token_head_dim};
    run_chaos(spec, "chaos-q4km-staged", checkpoint_cases(ck.gguf, kv), load_ms, kills_until_ms, false);
  }
}

#include "load.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "workload.hpp"

namespace epd::testing {

using nlohmann::json;
using clock_type = std::chrono::steady_clock;

void Outcome::add(const std::vector<uint32_t>& expected, int status, const json& body) {
  if (body.is_object() && body.contains("timings_ms") && body["timings_ms"].contains("first_token"))
    first_token_ms.push_back(body["timings_ms"]["first_token"].get<double>());
  if (status == 200) {
    if (body.is_object() && body.contains("tokens") &&
        body["tokens"].get<std::vector<uint32_t>>() == expected) {
      ++completed;
      if (body.value("attempts", 0) > 1) ++retried;
    } else {
      ++wrong;
    }
  } else if (status != 0 && body.is_object() && body.contains("error") && body["error"].is_object() &&
             body["error"].value("code", "") != "" && body["error"].value("message", "") != "") {
    ++failed;
    ++causes[body["error"]["code"].get<std::string>()];
    errors.push_back(std::to_string(status) + " " + body.dump());
    if (first_error.empty()) first_error = errors.back();
  } else {
    ++lost;
  }
}

Outcome run_load(Cluster& cluster, int n, int parallel, int trigger, const std::function<void()>& during) {
  const auto cases = workload(n);
  for (const auto& c : cases) oracle(c);  // computed before the clock matters
  std::vector<std::pair<int, json>> answers(cases.size());
  std::atomic<size_t> next{0};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < parallel; ++t)
    threads.emplace_back([&] {
      for (size_t i = next++; i < cases.size(); i = next++) {
        answers[i] = cluster.generate(request_of(cases[i]));
        ++done;
      }
    });
  if (during) {
    while (done.load() < trigger && done.load() < n)
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    during();
  }
  for (auto& t : threads) t.join();
  Outcome o;
  for (size_t i = 0; i < cases.size(); ++i) o.add(oracle(cases[i]), answers[i].first, answers[i].second);
  return o;
}

void report(const std::string& scenario, const Outcome& o, const json& stats, const char* tag) {
  std::ostringstream causes;
  for (const auto& [c, k] : o.causes) causes << c << "=" << k << " ";
  std::printf("[%s] %s: completed=%d (after a retry: %d) failed=%d lost=%d wrong=%d %s| router %s\n", tag,
              scenario.c_str(), o.completed, o.retried, o.failed, o.lost, o.wrong, causes.str().c_str(),
              stats.dump().c_str());
  if (!o.first_error.empty())
    std::printf("[%s] %s: first error: %s\n", tag, scenario.c_str(), o.first_error.c_str());
  std::fflush(stdout);
}

void check_all_free(const Cluster& cluster) {
  const json inst = cluster.wait_all_free(15000);
  INFO(inst.dump());
  for (const auto& i : inst) {
    CHECK(i["free_kv_pages"] == i["total_kv_pages"]);
    CHECK(i["free_slots"] == i["total_slots"]);
    CHECK(i["active_rooms"] == 0);
  }
}

Streamed stream_completion(const Cluster& cluster, nlohmann::json body) {
  body["stream"] = true;
  const auto [status, raw] = cluster.post_raw("/v1/completions", body.dump());
  Streamed s;
  s.status = status;
  std::istringstream lines(raw);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("data: ", 0) != 0) continue;
    const std::string data = line.substr(6);
    if (data == "[DONE]") {
      s.done = true;
      continue;
    }
    const auto chunk = nlohmann::json::parse(data, nullptr, false);
    if (!chunk.is_object() || !chunk.contains("choices") || chunk["choices"].empty()) continue;
    s.text += chunk["choices"][0].value("text", "");
    if (chunk["choices"][0]["finish_reason"].is_string())
      s.finish_reason = chunk["choices"][0]["finish_reason"];
  }
  return s;
}

size_t count_lines(const std::string& logs, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = logs.find(needle); pos != std::string::npos; pos = logs.find(needle, pos + 1)) ++n;
  return n;
}

int64_t wait_reincarnated(const Cluster& cluster, const std::string& id, uint64_t old, int timeout_ms) {
  const auto t0 = clock_type::now();
  while (clock_type::now() - t0 < std::chrono::milliseconds(timeout_ms)) {
    const json i = cluster.instance(id);
    if (!i.is_null() && i["healthy"] == true && i["incarnation"].get<uint64_t>() != old)
      return std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - t0).count();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

ClusterSpec kill_spec() {
  ClusterSpec spec;
  spec.heartbeat_ms = 250;  // "decode notices within 2 heartbeat intervals" = 500 ms
  spec.heartbeat_misses = 4;
  spec.restart = true;
  spec.max_attempts = 4;
  // Short input timeouts: a room whose other half died with the victim is not held for long.
  spec.defaults["prefill"] = "bootstrap_timeout_ms = 3000\n";
  return spec;
}

LogDump::~LogDump() {
  if (const char* dir = std::getenv("EPD_TEST_LOGS")) {
    std::FILE* f = std::fopen((std::string(dir) + "/" + name + ".log").c_str(), "w");
    if (!f) return;
    const std::string logs = cluster.logs();
    std::fwrite(logs.data(), 1, logs.size(), f);
    std::fclose(f);
  }
}

}  // namespace epd::testing

#pragma once
// What the fault and chaos tests share: load through the router's HTTP API with every answer classified
// against the colocated run (Outcome), the check that every page and slot is free again, waiting for a
// killed instance to come back, and the cluster spec of the kill scenarios.
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster.hpp"

namespace epd::testing {

struct Outcome {
  int completed = 0;                  // 200 with the oracle's tokens
  int retried = 0;                    // completed, but needed more than one attempt
  int failed = 0;                     // an HTTP error naming its cause
  int wrong = 0;                      // 200 with other tokens (must be 0)
  int lost = 0;                       // no answer at all, or an error without a cause (must be 0)
  std::map<std::string, int> causes;  // error code -> failures
  std::vector<std::string> errors;    // "<status> <body>" of every failure
  std::string first_error;
  std::vector<double> first_token_ms;  // timings_ms.first_token of every answer that has one

  // Classifies one answer to a request whose colocated run produced `expected`.
  void add(const std::vector<uint32_t>& expected, int status, const nlohmann::json& body);
};

// Runs `n` workload cases with `parallel` clients. `during` runs on this thread once `trigger` answers are
// in (the load keeps going meanwhile), e.g. to kill a process with requests in flight.
Outcome run_load(Cluster& cluster, int n, int parallel, int trigger = -1,
                 const std::function<void()>& during = {});

// Prints one "[<tag>] <scenario>: completed=... | router <stats>" line (and the first error).
void report(const std::string& scenario, const Outcome& o, const nlohmann::json& stats,
            const char* tag = "fault");

// Every surviving instance frees all its KV pages, slots and rooms (waits up to 15 s).
void check_all_free(const Cluster& cluster);

size_t count_lines(const std::string& logs, const std::string& needle);

// A streamed /v1/completions answer: the text deltas joined, and how the stream ended.
struct Streamed {
  int status = 0;
  std::string text, finish_reason;
  bool done = false;  // the stream ended with [DONE]
};

// POSTs `body` with "stream": true to /v1/completions and reads the whole stream.
Streamed stream_completion(const Cluster& cluster, nlohmann::json body);

// Waits until `id` is listed healthy with an incarnation other than `old`; returns ms waited or -1.
int64_t wait_reincarnated(const Cluster& cluster, const std::string& id, uint64_t old,
                          int timeout_ms = 20000);

// Kill scenarios: short heartbeats, restarts on (as epd-cluster), short prefill input timeouts.
ClusterSpec kill_spec();

// With EPD_TEST_LOGS=<dir>, every cluster's child logs are written there when the test ends (debugging).
struct LogDump {
  const Cluster& cluster;
  std::string name;
  ~LogDump();
};

}  // namespace epd::testing

#pragma once
// A real Prometheus server (Debian's `prometheus`) for tests: scrapes the given targets every second,
// optionally evaluates rule files, stores in a temporary directory, and is always stopped (process group)
// and cleaned up. Queries go through its HTTP API, as Grafana's would.
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cluster.hpp"

namespace epd::testing {

// How Prometheus scrapes the targets: https verified against `ca_file`, and/or a bearer key it reads from a
// file (as an operator's scrape config would).
struct ScrapeAuth {
  std::filesystem::path ca_file;  // non-empty: scheme https
  std::string bearer_key;         // non-empty: written to a 0600 file named by credentials_file
};

class PrometheusServer {
 public:
  // `targets`: HOST:PORT of /metrics endpoints (job "epd").
  PrometheusServer(std::vector<std::string> targets, std::vector<std::filesystem::path> rule_files = {},
                   ScrapeAuth auth = {});
  ~PrometheusServer();

  // Starts it and waits (bounded) until it is ready; throws with its log when it does not come up.
  void start();
  // An instant query; the `data.result` array (throws on an HTTP or query error).
  nlohmann::json query(const std::string& expr) const;
  // The single value of a query whose result is one sample; nullopt for an empty result.
  std::optional<double> value(const std::string& expr) const;
  // Polls `expr` until `ok(value)` holds or `timeout_ms` passes; returns the last value.
  std::optional<double> wait_for(const std::string& expr, const std::function<bool(double)>& ok,
                                 int timeout_ms = 30000) const;
  std::string logs() const { return sink_->text(); }
  int port() const { return port_; }

 private:
  std::vector<std::string> targets_;
  std::vector<std::filesystem::path> rule_files_;
  ScrapeAuth auth_;
  std::filesystem::path dir_;
  int port_ = 0;
  std::shared_ptr<MemorySink> sink_ = std::make_shared<MemorySink>();
  std::unique_ptr<launcher::ProcessGroup> group_;
};

// Runs `promtool check metrics` on `text`: its complaints (empty when the text is clean), or the reason it
// could not run.
std::string promtool_check_metrics(const std::string& text);

}  // namespace epd::testing

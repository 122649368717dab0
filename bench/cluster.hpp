#pragma once
// Starting a cluster from a config for the benchmarks that drive the router over HTTP (e2e, soak).
#include <toml++/toml.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "epd/config/cluster_config.hpp"
#include "epd/launcher/process_group.hpp"
#include "epd/model/config.hpp"

namespace epd::bench {

// The path of an executable installed next to this one (epd-cluster, epd-mtmd-reference).
std::string sibling_executable(const std::string& name);

// Where a router instance's HTTP listens: {host, port} of its `http` setting.
std::pair<std::string, int> http_address(const config::InstanceConfig& router);
// Where a config's router listens: {host, port}.
std::pair<std::string, int> router_address(const config::ClusterConfig& cfg);

// Starts `epd-cluster --config FILE` (next to this executable) and waits until the router lists
// `instances` healthy instances. Null (with the reason on stderr) if it cannot.
std::unique_ptr<launcher::ProcessGroup> start_cluster(const std::string& config, const std::string& host,
                                                      int port, size_t instances);

// A cluster config and the model it serves; nullopt (with the reason on stderr) if either does not load.
struct BenchConfig {
  config::ClusterConfig cluster;
  model::ModelConfig model;
};
std::optional<BenchConfig> load_bench_config(const std::string& path);

// Variant configs a bench writes: the parsed file (nullopt, with the reason on stderr, if it does not
// parse), its [defaults.<role>] table (made if missing), and the table written to `dir`/`name`.toml (its
// path; nullopt, with the reason on stderr, if it cannot be written).
std::optional<toml::table> read_config_toml(const std::string& path);
toml::table& role_defaults(toml::table& config, const char* role);
std::optional<std::string> write_config_toml(const toml::table& config, const std::filesystem::path& dir,
                                             const std::string& name);

// Sum of one metric over every instance of `role` that serves /metrics (0 when none does).
double metric_total(const config::ClusterConfig& cfg, const char* role, const std::string& name);

}  // namespace epd::bench

#pragma once
// Starting a cluster from a config for the benchmarks that drive the router over HTTP (e2e, soak).
#include <memory>
#include <string>
#include <utility>

#include "epd/config/cluster_config.hpp"
#include "epd/launcher/process_group.hpp"

namespace epd::bench {

// The path of an executable installed next to this one (epd-cluster, epd-mtmd-reference).
std::string sibling_executable(const std::string& name);

// Where a config's router listens: {host, port}.
std::pair<std::string, int> router_address(const config::ClusterConfig& cfg);

// Starts `epd-cluster --config FILE` (next to this executable) and waits until the router lists
// `instances` healthy instances. Null (with the reason on stderr) if it cannot.
std::unique_ptr<launcher::ProcessGroup> start_cluster(const std::string& config, const std::string& host,
                                                      int port, size_t instances);

}  // namespace epd::bench

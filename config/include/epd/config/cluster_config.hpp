#pragma once
// A cluster config file (TOML): the shared sections every instance reads, and the list of instances.
// One file describes a whole local cluster; a role executable picks its own entry with --id.
// docs/configuration.md documents every key.
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "epd/config/host_port.hpp"
#include "epd/config/security_config.hpp"
#include "epd/config/settings.hpp"
#include "epd/protocol/result.hpp"
#include "epd/transport/config.hpp"

namespace epd::config {

using protocol::Result;

struct ClusterSection {
  std::string name = "epd";
  // The instance id hosting the embedded registry, or "etcd": membership in etcd (docs/architecture.md).
  std::string registry = "router";
  std::vector<std::string> etcd_endpoints;         // http://HOST:PORT of etcd members (registry = "etcd")
  std::string etcd_prefix;                         // keys live under it; default "/epd/<name>/"
  std::chrono::milliseconds etcd_lease_ttl{5000};  // whole seconds, >= 2 s
  // etcd_watch = "routers": only routers watch etcd and send the others RECORDS (fleets of hundreds and
  // more); "instances" (default): every instance watches.
  bool etcd_routers_watch = false;
  std::chrono::milliseconds heartbeat_interval{500};
  uint32_t heartbeat_misses = 3;  // a peer silent for this many intervals is dead
  std::chrono::milliseconds request_timeout{60000};
  uint32_t max_attempts = 3;  // router retries of a failed request (retryable causes only)
  // How long an encoder, prefill or decode stopping on SIGTERM may take to finish the rooms it holds
  // (the router has its own drain_timeout_ms for its HTTP requests).
  std::chrono::milliseconds drain_timeout{4000};
};

// [etcd]: a single-member etcd that epd-cluster starts itself (registry = "etcd" on one machine).
struct EtcdSection {
  bool local = false;
  HostPort peer;                   // its raft peer port (the client port is etcd_endpoints[0])
  std::filesystem::path data_dir;  // empty: a temporary directory removed when epd-cluster stops
};

struct ModelSection {
  std::string preset = "tiny";  // used when `path` is empty
  // A model TOML file, or a Llama-family checkpoint (a Hugging Face directory, a .gguf or .safetensors
  // file); relative paths resolved against the cluster file.
  std::filesystem::path path;
  // llama.cpp's mmproj GGUF of the checkpoint (its vision tower); relative to the cluster file.
  std::filesystem::path mmproj;
  // Compute threads of a checkpoint runner per model instance; 0: every core the process may run on.
  uint32_t threads = 0;
};

struct InstanceConfig {
  std::string id;
  std::string role;
  std::string control;              // ZeroMQ endpoint the instance binds, e.g. tcp://127.0.0.1:17101
  std::optional<HostPort> metrics;  // where it serves GET /metrics (Prometheus); none when absent
  Settings settings;                // [defaults.<role>] overlaid with the instance's own keys
  Settings transport;               // [transport] overlaid with the instance's [instance.transport] keys
  std::filesystem::path
      curve_key;  // its CURVE key pair file (with [security] curve_keys); read when it starts
};

struct ClusterConfig {
  std::filesystem::path file;
  ClusterSection cluster;
  ModelSection model;
  SecuritySection security;
  EtcdSection etcd;
  std::vector<InstanceConfig> instances;

  const InstanceConfig* find(std::string_view id) const;
  bool uses_etcd() const { return cluster.registry == "etcd"; }
  // The instance hosting the embedded registry; null with registry = "etcd".
  const InstanceConfig* registry() const { return uses_etcd() ? nullptr : find(cluster.registry); }
  std::vector<const InstanceConfig*> with_role(std::string_view role) const;
};

// Parses and validates the file: unknown top-level sections, duplicate ids, bad endpoints, wrong types and
// a registry id that names no instance (other than "etcd", which needs etcd_endpoints) are config_error with
// the file and key in the message. With [security] curve_keys, the keys file must list every instance;
// without it, every address must be loopback.
Result<ClusterConfig> load_cluster_config(const std::filesystem::path& file);
Result<ClusterConfig> parse_cluster_config(std::string_view toml_text, const std::filesystem::path& file);

// The transport engine settings of one instance ([transport] + its overrides), validated.
Result<transport::EngineConfig> engine_config_for(const InstanceConfig& instance);

}  // namespace epd::config

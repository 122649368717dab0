#pragma once
// [security]: the control plane's CURVE keys (docs/configuration.md). `curve_keys` names the cluster's
// authorized keys file (`ID PUBLICKEY` lines, written by epd-keygen); each instance's own key pair is in
// `<that file's directory>/<id>.key`, or the file its `curve_key` names. Secrets are read from files only,
// and only by the instance they belong to (curve_config_for): a host need not hold the others' secrets.
// Without keys every listening address of the cluster must be loopback (check_loopback_only).
#include <filesystem>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "epd/protocol/result.hpp"
#include "epd/transport/control_channel.hpp"

namespace epd::config {

struct ClusterConfig;
struct InstanceConfig;

struct SecuritySection {
  std::filesystem::path curve_keys;  // the authorized keys file; empty: no keys (loopback only)
  std::vector<std::pair<std::string, std::string>> public_keys;  // id -> Z85 public key, from that file
  bool enabled() const { return !curve_keys.empty(); }
  // Who may scrape every instance's `metrics` address: bearer keys (one per line, as api_keys_file) and a
  // TLS certificate + key (PEM). Empty: open, plain HTTP. Paths are resolved against the config file.
  std::filesystem::path metrics_keys_file;
  std::filesystem::path metrics_tls_cert;
  std::filesystem::path metrics_tls_key;
  // The public key the file lists for `id`; "" when none.
  std::string public_key_of(std::string_view id) const;
};

// 127.0.0.0/8, ::1, localhost.
bool is_loopback_host(std::string_view host);

// Every address the cluster listens on (control endpoints, metrics, the router's http, [transport] host) is
// loopback or ipc://; else config_error saying which and how to add keys.
protocol::Status check_loopback_only(const ClusterConfig& cfg);

// The channel's CURVE settings for `instance`: its key pair (its key file is read now and must be mode 0600
// and match the public key the cluster lists for it), the cluster's public keys, and each instance's public
// key by its control endpoint. config_error naming the file otherwise.
protocol::Result<transport::CurveConfig> curve_config_for(const ClusterConfig& cfg,
                                                          const InstanceConfig& instance);

}  // namespace epd::config

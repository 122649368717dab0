#include "epd/config/security_config.hpp"

#include <map>

#include "epd/config/cluster_config.hpp"
#include "epd/transport/curve_keys.hpp"

namespace epd::config {
namespace {

using protocol::ErrorCode;
using protocol::make_error;

// The host of tcp://HOST:PORT ("" for ipc://, which is local by nature).
std::string endpoint_host(const std::string& ep) {
  if (ep.rfind("tcp://", 0) != 0) return "";
  std::string host = ep.substr(6, ep.rfind(':') - 6);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host;
}

protocol::Error not_loopback(const ClusterConfig& cfg, const std::string& what, const std::string& value) {
  return make_error(
      ErrorCode::config_error,
      cfg.file.string() + ": " + what + " = \"" + value +
          "\" is not a loopback address, and the cluster has no keys: without [security] "
          "curve_keys the control plane is unauthenticated, so every address must be 127.0.0.1, "
          "::1 or localhost. Write keys with `epd-keygen --out keys --id ID ...` and add "
          "[security] curve_keys = \"keys/cluster.pub\" (docs/configuration.md)");
}

}  // namespace

std::string SecuritySection::public_key_of(std::string_view id) const {
  for (const auto& [i, key] : public_keys)
    if (i == id) return key;
  return "";
}

bool is_loopback_host(std::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  if (host == "localhost" || host == "::1") return true;
  // 127.x.x.x: four dotted decimal parts, the first 127.
  if (host.rfind("127.", 0) != 0) return false;
  int parts = 1, digits = 0;
  for (char c : host.substr(4)) {
    if (c == '.') {
      if (digits == 0) return false;
      ++parts, digits = 0;
    } else if (c >= '0' && c <= '9' && digits < 3) {
      ++digits;
    } else {
      return false;
    }
  }
  return parts == 3 && digits > 0;  // parts after "127."
}

protocol::Status check_loopback_only(const ClusterConfig& cfg) {
  for (const auto& inst : cfg.instances) {
    const std::string where = "instance '" + inst.id + "' ";
    if (inst.control.rfind("tcp://", 0) == 0 && !is_loopback_host(endpoint_host(inst.control)))
      return not_loopback(cfg, where + "control", inst.control);
    if (inst.metrics && !is_loopback_host(inst.metrics->host))
      return not_loopback(cfg, where + "metrics", inst.metrics->text());
    if (inst.role == "router") {
      auto http = inst.settings.get_string("http", "127.0.0.1:8080");
      if (!http) return http.error();
      auto hp = parse_host_port(*http, "http", where);
      if (hp && !is_loopback_host(hp->host)) return not_loopback(cfg, where + "http", *http);
    }
    auto engine = engine_config_for(inst);
    if (!engine) return engine.error();
    if (!is_loopback_host(engine->host)) return not_loopback(cfg, where + "[transport] host", engine->host);
  }
  return {};
}

protocol::Result<transport::CurveConfig> curve_config_for(const ClusterConfig& cfg,
                                                          const InstanceConfig& inst) {
  if (!cfg.security.enabled())
    return make_error(ErrorCode::config_error, cfg.file.string() + ": [security] curve_keys is not set");
  auto pair = transport::read_curve_key_file(inst.curve_key);
  if (!pair) return pair.error();
  const std::string listed = cfg.security.public_key_of(inst.id);
  if (pair->public_key != listed)
    return make_error(ErrorCode::config_error, inst.curve_key.string() + ": the public key of instance '" +
                                                   inst.id + "' (" + pair->public_key.substr(0, 8) +
                                                   "...) is not the one " + cfg.security.curve_keys.string() +
                                                   " lists for it (" + listed.substr(0, 8) +
                                                   "...): run epd-keygen for it again");
  transport::CurveConfig c;
  c.public_key = pair->public_key;
  c.secret_key = pair->secret_key;
  std::map<std::string, std::string> by_endpoint;
  // Only the instances of this config are admitted, even if the keys file lists more.
  for (const auto& other : cfg.instances) {
    const std::string key = cfg.security.public_key_of(other.id);
    c.allowed[key] = other.id;
    by_endpoint[other.control] = key;
  }
  c.server_key = [by_endpoint = std::move(by_endpoint)](const std::string& endpoint) {
    auto it = by_endpoint.find(endpoint);
    return it == by_endpoint.end() ? std::string() : it->second;
  };
  return c;
}

}  // namespace epd::config

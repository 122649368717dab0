#include "epd/config/cluster_config.hpp"

#include <fstream>
#include <set>
#include <sstream>

#include "epd/protocol/codec.hpp"
#include "epd/transport/backend_registry.hpp"
#include "epd/transport/curve_keys.hpp"
#include "settings_table.hpp"

namespace epd::config {
namespace {

using protocol::ErrorCode;
using protocol::make_error;

protocol::Error bad(const std::filesystem::path& file, const std::string& what) {
  return make_error(ErrorCode::config_error, file.string() + ": " + what);
}

Settings settings_of(const toml::table* t, std::string where) {
  auto st = std::make_shared<SettingsTable>();
  if (t) st->table = *t;
  return Settings(std::move(st), std::move(where));
}

// base overlaid with over (keys of `over` win).
Settings merged(const toml::table* base, const toml::table* over, std::string where,
                const std::vector<std::string_view>& skip = {}) {
  auto st = std::make_shared<SettingsTable>();
  if (base) st->table = *base;
  if (over)
    for (const auto& [k, v] : *over) {
      bool skipped = false;
      for (auto s : skip) skipped = skipped || k.str() == s;
      if (!skipped) st->table.insert_or_assign(k, v);
    }
  return Settings(std::move(st), std::move(where));
}

bool valid_endpoint(const std::string& ep) {
  return (ep.rfind("tcp://", 0) == 0 && ep.find(':', 6) != std::string::npos) || ep.rfind("ipc://", 0) == 0;
}

// http://HOST:PORT: etcd's client URL (its JSON gateway speaks plain HTTP here).
protocol::Status check_etcd_url(const std::string& url, const std::filesystem::path& file) {
  constexpr std::string_view scheme = "http://";
  std::string_view rest(url);
  if (rest.substr(0, scheme.size()) != scheme)
    return bad(file, "[cluster] etcd_endpoints: '" + url + "' is not http://HOST:PORT");
  rest.remove_prefix(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.remove_suffix(1);
  auto hp = parse_host_port(rest, "etcd_endpoints", file.string() + " [cluster]");
  if (!hp) return hp.error();
  if (hp->port == 0) return bad(file, "[cluster] etcd_endpoints: '" + url + "' needs a port");
  return {};
}

// [cluster] etcd_endpoints / etcd_prefix / etcd_lease_ttl_ms / etcd_watch: required and checked with registry
// = "etcd", refused without it (they would be silently ignored).
protocol::Status parse_etcd_keys(toml::table& root, const Settings& s, ClusterSection& c,
                                 const std::filesystem::path& file) {
  const bool etcd = c.registry == "etcd";
  for (auto key : {"etcd_endpoints", "etcd_prefix", "etcd_lease_ttl_ms", "etcd_watch"})
    if (!etcd && s.has(key)) return bad(file, std::string("[cluster] ") + key + " needs registry = \"etcd\"");
  if (!etcd) return {};
  const toml::node* list = root["cluster"]["etcd_endpoints"].node();
  if (!list || !list->is_array() || list->as_array()->empty())
    return bad(file, "[cluster] registry = \"etcd\" needs etcd_endpoints = [\"http://HOST:PORT\", ...]");
  for (const auto& item : *list->as_array()) {
    if (!item.is_string()) return bad(file, "[cluster] etcd_endpoints must be a list of strings");
    std::string url = item.as_string()->get();
    if (auto st = check_etcd_url(url, file); !st) return st.error();
    c.etcd_endpoints.push_back(std::move(url));
  }
  protocol::FirstError e;
  std::string watch;
  e.take(c.etcd_prefix, s.get_string("etcd_prefix", "/epd/" + c.name + "/"))
      .take(c.etcd_lease_ttl, s.get_ms("etcd_lease_ttl_ms", c.etcd_lease_ttl))
      .take(watch, s.get_string("etcd_watch", "instances"));
  if (!e.status()) return e.status().error();
  if (watch != "instances" && watch != "routers")
    return bad(file,
               "[cluster] etcd_watch must be \"instances\" (every instance watches etcd) or \"routers\" "
               "(routers watch and pass the records on), got '" +
                   watch + "'");
  c.etcd_routers_watch = watch == "routers";
  if (c.etcd_prefix.empty() || c.etcd_prefix.front() != '/' || c.etcd_prefix.back() != '/')
    return bad(file, "[cluster] etcd_prefix must start and end with '/', got '" + c.etcd_prefix + "'");
  // etcd grants whole seconds and raises anything below its minimum (1.5 election timeouts) to it.
  if (c.etcd_lease_ttl.count() % 1000 != 0 || c.etcd_lease_ttl < std::chrono::milliseconds(2000))
    return bad(file, "[cluster] etcd_lease_ttl_ms must be whole seconds and at least 2000, got " +
                         std::to_string(c.etcd_lease_ttl.count()));
  return {};
}

// [etcd] local = true: epd-cluster starts a single-member etcd on the first endpoint's (loopback) port.
protocol::Status parse_etcd_section(toml::table& root, ClusterConfig& cfg,
                                    const std::filesystem::path& file) {
  auto s = settings_of(root["etcd"].as_table(), file.string() + " [etcd]");
  if (!root["etcd"]) return {};
  if (auto st = s.only_keys({"local", "peer", "data_dir"}); !st) return st.error();
  std::string peer, data_dir;
  protocol::FirstError e;
  e.take(cfg.etcd.local, s.get_bool("local", false))
      .take(peer, s.get_string("peer", ""))
      .take(data_dir, s.get_string("data_dir", ""));
  if (!e.status()) return e.status().error();
  if (!cfg.etcd.local) return {};
  if (!cfg.uses_etcd()) return bad(file, "[etcd] local = true needs [cluster] registry = \"etcd\"");
  const std::string first = cfg.cluster.etcd_endpoints.front();
  auto client = parse_host_port(std::string_view(first).substr(7), "etcd_endpoints", file.string());
  if (!client || !is_loopback_host(client->host))
    return bad(
        file, "[etcd] local = true: the first etcd endpoint must be a loopback address, got '" + first + "'");
  if (peer.empty()) return bad(file, "[etcd] local = true needs peer = \"127.0.0.1:PORT\" (its raft port)");
  auto hp = parse_host_port(peer, "peer", file.string() + " [etcd]");
  if (!hp) return hp.error();
  if (!is_loopback_host(hp->host) || hp->port == 0 || hp->port == client->port)
    return bad(file,
               "[etcd] peer must be a loopback HOST:PORT other than the client port, got '" + peer + "'");
  cfg.etcd.peer = *hp;
  if (!data_dir.empty()) {
    cfg.etcd.data_dir = data_dir;
    if (cfg.etcd.data_dir.is_relative()) cfg.etcd.data_dir = file.parent_path() / cfg.etcd.data_dir;
  }
  return {};
}

}  // namespace

const InstanceConfig* ClusterConfig::find(std::string_view id) const {
  for (const auto& i : instances)
    if (i.id == id) return &i;
  return nullptr;
}

std::vector<const InstanceConfig*> ClusterConfig::with_role(std::string_view role) const {
  std::vector<const InstanceConfig*> out;
  for (const auto& i : instances)
    if (i.role == role) out.push_back(&i);
  return out;
}

Result<ClusterConfig> load_cluster_config(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return bad(file, "cannot open the config file");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_cluster_config(ss.str(), file);
}

Result<ClusterConfig> parse_cluster_config(std::string_view text, const std::filesystem::path& file) {
  toml::table root;
  try {
    root = toml::parse(text, file.string());
  } catch (const toml::parse_error& e) {
    std::ostringstream msg;
    msg << "line " << e.source().begin.line << ": " << e.description();
    return bad(file, msg.str());
  }
  ClusterConfig cfg;
  cfg.file = file;
  for (const auto& [k, _] : root) {
    static const std::set<std::string> known = {"cluster",  "model",    "transport", "defaults",
                                                "instance", "security", "etcd"};
    if (!known.count(std::string(k.str())))
      return bad(file, "unknown section '" + std::string(k.str()) + "'");
  }

  {
    auto s = settings_of(root["cluster"].as_table(), file.string() + " [cluster]");
    if (auto st = s.only_keys({"name", "registry", "heartbeat_interval_ms", "heartbeat_misses",
                               "request_timeout_ms", "max_attempts", "etcd_endpoints", "etcd_prefix",
                               "etcd_lease_ttl_ms", "etcd_watch", "drain_timeout_ms"});
        !st)
      return st.error();
    auto& c = cfg.cluster;
    protocol::FirstError e;
    e.take(c.name, s.get_string("name", c.name))
        .take(c.registry, s.get_string("registry", c.registry))
        .take(c.heartbeat_interval, s.get_ms("heartbeat_interval_ms", c.heartbeat_interval))
        .take(c.heartbeat_misses, s.get_uint("heartbeat_misses", c.heartbeat_misses, 1, 1000))
        .take(c.request_timeout, s.get_ms("request_timeout_ms", c.request_timeout))
        .take(c.max_attempts, s.get_uint("max_attempts", c.max_attempts, 1, 100))
        .take(c.drain_timeout, s.get_ms("drain_timeout_ms", c.drain_timeout));
    if (!e.status()) return e.status().error();
    if (c.heartbeat_interval.count() == 0) return bad(file, "[cluster] heartbeat_interval_ms must be > 0");
    if (auto st = parse_etcd_keys(root, s, c, file); !st) return st.error();
  }
  if (auto st = parse_etcd_section(root, cfg, file); !st) return st.error();
  {
    auto s = settings_of(root["model"].as_table(), file.string() + " [model]");
    if (auto st = s.only_keys({"preset", "path", "mmproj", "threads"}); !st) return st.error();
    std::string path, mmproj;
    protocol::FirstError e;
    e.take(cfg.model.preset, s.get_string("preset", cfg.model.preset))
        .take(path, s.get_string("path", ""))
        .take(mmproj, s.get_string("mmproj", ""))
        .take(cfg.model.threads, s.get_uint("threads", cfg.model.threads, 1, 256));
    if (!e.status()) return e.status().error();
    if (!path.empty()) {
      cfg.model.path = path;
      if (cfg.model.path.is_relative()) cfg.model.path = file.parent_path() / cfg.model.path;
    }
    if (!mmproj.empty()) {
      if (path.empty()) return bad(file, "[model] mmproj needs a path (the checkpoint it belongs to)");
      cfg.model.mmproj = mmproj;
      if (cfg.model.mmproj.is_relative()) cfg.model.mmproj = file.parent_path() / cfg.model.mmproj;
    }
  }
  {
    auto s = settings_of(root["security"].as_table(), file.string() + " [security]");
    if (auto st = s.only_keys({"curve_keys", "metrics_keys_file", "metrics_tls_cert", "metrics_tls_key"});
        !st)
      return st.error();
    // Paths of files read when each instance starts (they may hold secrets: only the instance reads them).
    for (auto [key, out] : {std::pair{"metrics_keys_file", &cfg.security.metrics_keys_file},
                            std::pair{"metrics_tls_cert", &cfg.security.metrics_tls_cert},
                            std::pair{"metrics_tls_key", &cfg.security.metrics_tls_key}}) {
      auto v = s.get_string(key, "");
      if (!v) return v.error();
      if (s.has(key) && v->empty()) return bad(file, std::string("[security] ") + key + " must not be empty");
      *out = *v;
      if (!out->empty() && out->is_relative()) *out = file.parent_path() / *out;
    }
    if (cfg.security.metrics_tls_cert.empty() != cfg.security.metrics_tls_key.empty())
      return bad(
          file,
          "[security] metrics_tls_cert and metrics_tls_key go together (both PEM file paths, or neither)");
    std::string keys;
    if (auto r = s.get_string("curve_keys", ""); !r)
      return r.error();
    else
      keys = *r;
    if (!keys.empty()) {
      cfg.security.curve_keys = keys;
      if (cfg.security.curve_keys.is_relative()) cfg.security.curve_keys = file.parent_path() / keys;
      auto listed = transport::read_authorized_keys(cfg.security.curve_keys);
      if (!listed) return bad(file, "[security] curve_keys: " + listed.error().detail);
      cfg.security.public_keys = std::move(*listed);
    }
  }
  const toml::table* transport = root["transport"].as_table();
  const toml::table* defaults = root["defaults"].as_table();

  const toml::array* list = root["instance"].as_array();
  if (!list || list->empty()) return bad(file, "no [[instance]] entries");
  std::set<std::string> ids, controls, metrics_addresses;
  for (size_t i = 0; i < list->size(); ++i) {
    const toml::table* t = (*list)[i].as_table();
    if (!t) return bad(file, "[[instance]] #" + std::to_string(i + 1) + " is not a table");
    InstanceConfig inst;
    std::string metrics, curve_key;
    auto base = settings_of(t, file.string() + " [[instance]] #" + std::to_string(i + 1));
    protocol::FirstError e;
    e.take(inst.id, base.get_string("id", ""))
        .take(inst.role, base.get_string("role", ""))
        .take(inst.control, base.get_string("control", ""))
        .take(metrics, base.get_string("metrics", ""))
        .take(curve_key, base.get_string("curve_key", ""));
    if (!e.status()) return e.status().error();
    if (!protocol::valid_instance_id(inst.id))
      return bad(file, "[[instance]] #" + std::to_string(i + 1) +
                           ": 'id' must be 1..64 printable ASCII characters without spaces");
    const std::string where = file.string() + " instance '" + inst.id + "'";
    if (!ids.insert(inst.id).second) return bad(file, "duplicate instance id '" + inst.id + "'");
    if (inst.role.empty()) return bad(file, "instance '" + inst.id + "' has no 'role'");
    if (!valid_endpoint(inst.control))
      return bad(file, "instance '" + inst.id + "': 'control' must be tcp://HOST:PORT or ipc://PATH, got '" +
                           inst.control + "'");
    if (!controls.insert(inst.control).second)
      return bad(file, "instance '" + inst.id + "': control endpoint " + inst.control + " is used twice");
    if (!metrics.empty()) {
      auto hp = parse_host_port(metrics, "metrics", where);
      if (!hp) return hp.error();
      if (hp->port != 0 && !metrics_addresses.insert(hp->text()).second)
        return bad(file, "instance '" + inst.id + "': metrics address " + hp->text() + " is used twice");
      inst.metrics = *hp;
    }
    if (cfg.security.enabled()) {
      if (cfg.security.public_key_of(inst.id).empty())
        return bad(file, "instance '" + inst.id + "' has no public key in " +
                             cfg.security.curve_keys.string() + " (run epd-keygen --out DIR --id " + inst.id +
                             ")");
      inst.curve_key = curve_key.empty() ? cfg.security.curve_keys.parent_path() / (inst.id + ".key")
                                         : std::filesystem::path(curve_key);
      if (inst.curve_key.is_relative()) inst.curve_key = file.parent_path() / inst.curve_key;
    } else if (!curve_key.empty()) {
      return bad(file, "instance '" + inst.id + "': curve_key needs [security] curve_keys");
    }
    const toml::table* role_defaults = defaults ? (*defaults)[inst.role].as_table() : nullptr;
    inst.settings =
        merged(role_defaults, t, where, {"id", "role", "control", "metrics", "transport", "curve_key"});
    inst.transport = merged(transport, (*t)["transport"].as_table(), where + " transport");
    cfg.instances.push_back(std::move(inst));
  }
  if (!cfg.uses_etcd() && !cfg.registry())
    return bad(file, "[cluster] registry = '" + cfg.cluster.registry +
                         "' names no instance (an instance id, or \"etcd\" with etcd_endpoints)");
  for (const auto& inst : cfg.instances)
    if (auto e = engine_config_for(inst); !e) return e.error();
  if (!cfg.security.enabled())
    if (auto st = check_loopback_only(cfg); !st) return st.error();
  return cfg;
}

Result<transport::EngineConfig> engine_config_for(const InstanceConfig& inst) {
  const Settings& s = inst.transport;
  // The engine's own keys; every other key must belong to a registered backend, which parses it itself.
  std::vector<std::string_view> known = {"backend",         "host",           "fault_error_rate",
                                         "fault_delay_us",  "fault_stall_us", "fault_throw_after_ops",
                                         "fault_throw_max", "fault_seed"};
  for (const transport::BackendPlugin* p : transport::backend_plugins())
    known.insert(known.end(), p->option_keys.begin(), p->option_keys.end());
  if (auto st = s.only_keys(known); !st) return st.error();
  transport::EngineConfig e;
  e.instance_id = inst.id;
  std::string backend;
  protocol::FirstError read;
  if (!read.take(backend, s.get_string("backend", "auto"))
           .take(e.host, s.get_string("host", e.host))
           .status())
    return read.status().error();
  if (backend != "auto") {
    if (!transport::find_backend(backend))
      return make_error(ErrorCode::config_error, s.where() + ": key 'backend' must be auto, " +
                                                     transport::backend_names_text() + ", got '" + backend +
                                                     "'");
    e.force = backend;
    e.offer = {backend};  // an instance told to speak one backend serves only that one too
  }
  e.options.where = s.where();
  for (const transport::BackendPlugin* p : transport::backend_plugins()) {
    for (std::string_view key : p->option_keys) {
      auto value = s.get_scalar(key);
      if (!value) return value.error();
      if (*value) e.options.set(std::string(key), std::move(**value));
    }
  }
  if (auto st = transport::check_backend_options(e.options); !st) return st.error();
  read.take(e.fault.error_rate, s.get_double("fault_error_rate", 0.0))
      .take(e.fault.delay_us, s.get_uint("fault_delay_us", 0, 0, 60'000'000))
      .take(e.fault.stall_us, s.get_uint("fault_stall_us", 0, 0, 60'000'000))
      .take(e.fault.throw_after_ops, s.get_uint("fault_throw_after_ops", 0))
      .take(e.fault.throw_max, s.get_uint("fault_throw_max", 0))
      .take(e.fault.seed, s.get_uint("fault_seed", 1));
  if (!read.status()) return read.status().error();
  if (e.fault.error_rate < 0 || e.fault.error_rate > 1)
    return make_error(ErrorCode::config_error, s.where() + ": fault_error_rate must be in [0, 1]");
  e.fault.enabled =
      e.fault.error_rate > 0 || e.fault.delay_us > 0 || e.fault.stall_us > 0 || e.fault.throw_after_ops > 0;
  return e;
}

}  // namespace epd::config

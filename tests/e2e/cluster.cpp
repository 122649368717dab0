#include "cluster.hpp"

#include "epd/actors/build_identity.hpp"
#include "epd/model/config.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <algorithm>
#include <chrono>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "epd/launcher/free_port.hpp"
#include "epd/transport/curve_keys.hpp"

namespace epd::testing {

protocol::BuildIdentity tiny_identity() {
  auto id = actors::local_identity(*model::preset("tiny"));
  if (!id) throw std::runtime_error(id.error().to_string());
  return *id;
}

int free_port() {
  return launcher::free_port();
}

void MemorySink::write_line(std::string_view line) {
  std::lock_guard lock(mu_);
  text_.append(line);
  text_.push_back('\n');
}

std::string MemorySink::text() const {
  std::lock_guard lock(mu_);
  return text_;
}

namespace {

// A CA and a certificate it signed for 127.0.0.1 (ca.pem, server.pem, server.key) in `dir`, with the
// openssl CLI.
void make_certs(const std::filesystem::path& dir) {
  std::ofstream(dir / "ext.cnf") << "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n"
                                    "keyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n";
  const std::string ec = " -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
  const std::string cmd = "cd '" + dir.string() + "' && umask 077 && (openssl req -x509" + ec +
                          " -keyout ca.key -out ca.pem -days 2 -subj /CN=epd-e2e-ca"
                          " -addext keyUsage=critical,keyCertSign,cRLSign && openssl req" +
                          ec +
                          " -keyout server.key -out server.csr -subj /CN=127.0.0.1 && openssl x509 -req"
                          " -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile ext.cnf"
                          " -out server.pem) >openssl.log 2>&1";
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("openssl failed; see " + dir.string());
}

}  // namespace

Cluster::Cluster(ClusterSpec spec) : spec_(std::move(spec)) {
  dir_ = std::filesystem::temp_directory_path() /
         ("epd-e2e-" + std::to_string(::getpid()) + "-" + std::to_string(free_port()));
  std::filesystem::create_directories(dir_);
  config_ = dir_ / "cluster.toml";
  http_port_ = free_port();
  instances_.emplace_back("router", "router");
  for (int i = 0; i < spec_.encoders; ++i) instances_.emplace_back("encoder-" + std::to_string(i), "encoder");
  for (int i = 0; i < spec_.prefills; ++i) instances_.emplace_back("prefill-" + std::to_string(i), "prefill");
  for (int i = 0; i < spec_.decodes; ++i) instances_.emplace_back("decode-" + std::to_string(i), "decode");
  std::ostringstream cfg;
  cfg << "[cluster]\nname = \"e2e\"\n";
  if (spec_.etcd_endpoints.empty()) {
    cfg << "registry = \"router\"\n";
  } else {
    cfg << "registry = \"etcd\"\netcd_endpoints = [";
    for (size_t i = 0; i < spec_.etcd_endpoints.size(); ++i)
      cfg << (i ? ", " : "") << "\"" << spec_.etcd_endpoints[i] << "\"";
    cfg << "]\netcd_lease_ttl_ms = " << spec_.etcd_lease_ttl_ms << "\n";
    if (!spec_.etcd_watch.empty()) cfg << "etcd_watch = \"" << spec_.etcd_watch << "\"\n";
  }
  cfg << "heartbeat_interval_ms = " << spec_.heartbeat_ms << "\nheartbeat_misses = " << spec_.heartbeat_misses
      << "\nrequest_timeout_ms = " << spec_.request_timeout_ms << "\nmax_attempts = " << spec_.max_attempts
      << (spec_.drain_timeout_ms ? "\ndrain_timeout_ms = " + std::to_string(spec_.drain_timeout_ms) : "")
      << "\n\n[model]\npreset = \"" << spec_.model_preset << "\"\n"
      << (spec_.model_path.empty() ? "" : "path = \"" + spec_.model_path + "\"\n")
      << (spec_.mmproj.empty() ? "" : "mmproj = \"" + spec_.mmproj + "\"\n") << "\n"
      << "[transport]\nbackend = \"" << spec_.backend << "\"\nhost = \"127.0.0.1\"\ntcp_lanes = 2\n\n";
  auto defaults = spec_.defaults;
  if (defaults["decode"].find("kv_pages") == std::string::npos)
    defaults["decode"] = "kv_pages = 512\n" + defaults["decode"];
  for (const auto& [role, lines] : defaults) cfg << "[defaults." << role << "]\n" << lines << "\n";
  for (const auto& [id, role] : instances_) {
    const int port = free_port();
    control_ports_.emplace_back(id, port);
    cfg << "[[instance]]\nid = \"" << id << "\"\nrole = \"" << role
        << "\"\ncontrol = \"tcp://127.0.0.1:" << port << "\"\n";
    if (role == "router") {
      cfg << "http = \"127.0.0.1:" << http_port_ << "\"\n";
      // Relative paths: the router resolves them against the config file's directory.
      if (!spec_.api_key.empty()) {
        std::ofstream(dir_ / "keys.txt") << "# e2e\n" << spec_.api_key << "\n";
        std::filesystem::permissions(
            dir_ / "keys.txt", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
        cfg << "api_keys_file = \"keys.txt\"\n";
      }
      if (spec_.tls || spec_.metrics_tls) {
        make_certs(dir_);
      }
      if (spec_.tls) {
        cfg << "tls_cert = \"server.pem\"\ntls_key = \"server.key\"\n";
      }
    }
    if (spec_.metrics) {
      metrics_ports_[id] = free_port();
      cfg << "metrics = \"127.0.0.1:" << metrics_ports_[id] << "\"\n";
    }
    if (auto it = spec_.instance_extra.find(id); it != spec_.instance_extra.end()) cfg << it->second;
    cfg << "\n";
  }
  cfg << spec_.extra_sections;
  if (spec_.curve || !spec_.metrics_key.empty() || spec_.metrics_tls) cfg << "\n[security]\n";
  if (spec_.curve) {
    auto written = transport::write_cluster_keys(dir_ / "keys", ids(), false);
    if (!written) throw std::runtime_error(written.error().to_string());
    cfg << "curve_keys = \"keys/cluster.pub\"\n";
  }
  if (!spec_.metrics_key.empty()) {
    std::ofstream(dir_ / "metrics-keys.txt") << spec_.metrics_key << "\n";
    std::filesystem::permissions(dir_ / "metrics-keys.txt",
                                 std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    cfg << "metrics_keys_file = \"metrics-keys.txt\"\n";
  }
  if (spec_.metrics_tls) cfg << "metrics_tls_cert = \"server.pem\"\nmetrics_tls_key = \"server.key\"\n";
  std::ofstream(config_) << cfg.str();
}

Cluster::~Cluster() {
  stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

std::vector<std::string> Cluster::ids() const {
  std::vector<std::string> out;
  for (const auto& [id, _] : instances_) out.push_back(id);
  for (const auto& id : spec_.extra_ids) out.push_back(id);
  return out;
}

std::string Cluster::control_endpoint(const std::string& id) const {
  for (const auto& [i, port] : control_ports_)
    if (i == id) return "tcp://127.0.0.1:" + std::to_string(port);
  throw std::runtime_error("no instance " + id);
}

void Cluster::start() {
  launcher::GroupOptions opts;
  opts.stop_grace = std::chrono::milliseconds(3000);
  opts.restart.enabled = spec_.restart;
  opts.restart.initial_backoff = std::chrono::milliseconds(200);
  group_ = std::make_unique<launcher::ProcessGroup>(opts, sink_);
  std::vector<launcher::ChildSpec> children;
  for (const auto& [id, role] : instances_)
    children.push_back(
        {id, {std::string(EPD_BIN_DIR) + "/epd-" + role, "--config", config_.string(), "--id", id}});
  for (const auto& id : spec_.extra_ids)
    children.push_back(
        {id, {std::string(EPD_BIN_DIR) + "/epd-role", "--config", config_.string(), "--id", id}});
  if (auto st = group_->start(std::move(children)); !st) throw std::runtime_error(st.error().to_string());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(spec_.start_timeout_ms);
  const size_t expected = ids().size();
  while (std::chrono::steady_clock::now() < deadline) {
    size_t healthy = 0;
    try {
      // Only our own instances count: another test process's cluster could answer on a port we picked
      // (our router then failed to bind), and its instances have other control endpoints.
      for (const auto& i : instances()) {
        const std::string id = i.value("id", "");
        const bool ours = std::any_of(control_ports_.begin(), control_ports_.end(), [&](const auto& p) {
          return p.first == id && i.value("control_endpoint", "") == control_endpoint(id);
        });
        const bool extra =
            std::find(spec_.extra_ids.begin(), spec_.extra_ids.end(), id) != spec_.extra_ids.end();
        if (i.value("healthy", false) && (ours || extra)) ++healthy;
      }
    } catch (...) {
    }
    if (healthy == expected && group_->alive() == expected) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  throw std::runtime_error("cluster did not become ready; logs:\n" + logs());
}

void Cluster::stop() {
  if (group_) group_->stop();
}

std::string Cluster::stop_and_collect_sanitizer_reports() {
  stop();
  std::string out;
  std::istringstream in(logs());
  for (std::string line; std::getline(in, line);)
    if (line.find("Sanitizer") != std::string::npos || line.find("runtime error:") != std::string::npos)
      out += line + "\n";
  return out;
}

std::string Cluster::base_url() const {
  return (spec_.tls ? "https" : "http") + std::string("://127.0.0.1:") + std::to_string(http_port_);
}

// A client of the router that sends the spec's key and verifies its TLS certificate.
httplib::Client Cluster::client() const {
  httplib::Client c(base_url());
  if (spec_.tls) c.set_ca_cert_path(ca_file().string());
  if (!spec_.api_key.empty()) c.set_bearer_token_auth(spec_.api_key);
  return c;
}

std::pair<int, std::string> Cluster::post_raw(const std::string& path, const std::string& body) const {
  auto c = client();
  c.set_read_timeout(60, 0);
  auto r = c.Post(path.c_str(), body, "application/json");
  if (!r) return {0, ""};
  return {r->status, r->body};
}

std::pair<int, std::string> Cluster::get_raw(const std::string& path) const {
  auto c = client();
  c.set_read_timeout(60, 0);
  auto r = c.Get(path.c_str());
  if (!r) return {0, ""};
  return {r->status, r->body};
}

std::pair<int, nlohmann::json> Cluster::generate(const nlohmann::json& request) const {
  auto [status, body] = post_raw("/v1/generate", request.dump());
  if (status == 0) return {0, nlohmann::json()};
  return {status, nlohmann::json::parse(body, nullptr, false)};
}

nlohmann::json Cluster::instances() const {
  auto c = client();
  c.set_read_timeout(5, 0);
  auto r = c.Get("/v1/instances");
  if (!r || r->status != 200) return nlohmann::json::array();
  return nlohmann::json::parse(r->body, nullptr, false);
}

nlohmann::json Cluster::stats() const {
  auto c = client();
  c.set_read_timeout(5, 0);
  auto r = c.Get("/v1/stats");
  if (!r || r->status != 200) return nlohmann::json::object();
  return nlohmann::json::parse(r->body, nullptr, false);
}

int Cluster::metrics_port(const std::string& id) const {
  auto it = metrics_ports_.find(id);
  if (it == metrics_ports_.end())
    throw std::runtime_error("no metrics port for '" + id + "' (spec.metrics?)");
  return it->second;
}

std::string Cluster::scrape(const std::string& id) const {
  httplib::Client c((spec_.metrics_tls ? "https" : "http") + std::string("://127.0.0.1:") +
                    std::to_string(metrics_port(id)));
  if (spec_.metrics_tls) c.set_ca_cert_path(ca_file().string());
  if (!spec_.metrics_key.empty()) c.set_bearer_token_auth(spec_.metrics_key);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/metrics");
  if (!r || r->status != 200) throw std::runtime_error("scraping '" + id + "' failed");
  return r->body;
}

nlohmann::json Cluster::instance(const std::string& id) const {
  for (const auto& i : instances())
    if (i.value("id", "") == id) return i;
  return nullptr;
}

nlohmann::json Cluster::instance_when(const std::string& id,
                                      const std::function<bool(const nlohmann::json&)>& ready,
                                      int timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  nlohmann::json last = instance(id);
  while (!(last.is_object() && ready(last)) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    last = instance(id);
  }
  return last;
}

pid_t Cluster::pid(const std::string& id) const {
  auto st = group_->status(id);
  return st ? st->pid : 0;
}

nlohmann::json Cluster::wait_all_free(int timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  nlohmann::json last;
  while (std::chrono::steady_clock::now() < deadline) {
    last = instances();
    bool all_free = !last.empty();
    for (const auto& i : last)
      all_free = all_free && i["free_kv_pages"] == i["total_kv_pages"] &&
                 i["free_slots"] == i["total_slots"] && i["active_rooms"] == 0;
    if (all_free) return last;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return last;
}

double metric_sum(const std::string& scrape, const std::string& name) {
  std::istringstream in(scrape);
  double sum = 0;
  for (std::string line; std::getline(in, line);)
    if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0)
      sum += std::stod(line.substr(line.rfind(' ') + 1));
  return sum;
}

}  // namespace epd::testing

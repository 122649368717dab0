#pragma once
// A real local cluster for tests: writes a config with free ports, starts every role as its own process
// (through the launcher's ProcessGroup, so they are always stopped and reaped), waits until all are
// registered, and offers HTTP and raw control-plane access to them.
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "epd/launcher/process_group.hpp"
#include "epd/protocol/messages.hpp"

namespace httplib {
class Client;
}

namespace epd::testing {

struct ClusterSpec {
  std::string backend = "auto";       // [transport] backend
  std::string model_preset = "tiny";  // "bench" decodes ~10x slower: room to cancel or drain mid-answer
  std::string model_path;             // [model] path (a checkpoint or model TOML); wins over the preset
  std::string mmproj;                 // [model] mmproj (with model_path)
  int encoders = 1;
  int prefills = 1;
  int decodes = 1;
  std::string extra_sections;          // appended verbatim (e.g. extra instances)
  std::vector<std::string> extra_ids;  // instances in extra_sections to wait for
  // [cluster] timing. The ZMTP heartbeat timeout and the registry expiry are interval x misses.
  int heartbeat_ms = 100;
  int heartbeat_misses = 50;  // 5 s: a process starved for a moment on a loaded CI box is not declared dead
  int max_attempts = 3;
  int request_timeout_ms = 30000;
  int drain_timeout_ms = 0;  // [cluster] drain_timeout_ms: how long a SIGTERM waits for rooms; 0: the default
  // Lines added to [defaults.<role>] (role -> "key = value\n...").
  std::map<std::string, std::string> defaults;
  // Text appended inside one instance's table (id -> text), e.g. "[instance.transport]\nfault_seed = 3\n".
  std::map<std::string, std::string> instance_extra;
  bool restart = false;  // the ProcessGroup restarts dead children (as epd-cluster does)
  // start() gives up after this long. Roles under qemu's TCG (the Soft-RoCE VM) start many times slower.
  int start_timeout_ms = 30000;
  bool metrics = false;  // every instance serves /metrics on a free port (metrics_port)
  // The router requires this API key (api_keys_file); the cluster's own requests send it.
  std::string api_key;
  // The router speaks TLS with a certificate for 127.0.0.1 signed by a CA made for the cluster (ca_file());
  // the cluster's own requests verify it.
  bool tls = false;
  // CURVE on the control plane: epd-keygen's library writes a key pair per instance into <dir>/keys, and
  // [security] curve_keys names its cluster.pub (docs/configuration.md).
  bool curve = false;
  // Every /metrics requires this bearer key ([security] metrics_keys_file); scrape() sends it.
  std::string metrics_key;
  // Every /metrics speaks TLS with the cluster's certificate ([security] metrics_tls_*); scrape() verifies
  // it.
  bool metrics_tls = false;
  // Membership in etcd ([cluster] registry = "etcd" with these endpoints) instead of the router's registry.
  std::vector<std::string> etcd_endpoints;
  int etcd_lease_ttl_ms = 2000;
  std::string etcd_watch;  // [cluster] etcd_watch: empty for the default (every instance watches)
};

// What a build of this tree serving the tiny preset says in HELLO (docs/protocol.md, "Compatibility"): what
// a test's own control-plane client sends to be taken for a member.
protocol::BuildIdentity tiny_identity();

// Collects the children's prefixed log lines (dumped when a test fails).
class MemorySink : public launcher::OutputSink {
 public:
  void write_line(std::string_view line) override;
  std::string text() const;

 private:
  mutable std::mutex mu_;
  std::string text_;
};

class Cluster {
 public:
  explicit Cluster(ClusterSpec spec);
  ~Cluster();

  // Starts all instances and waits (bounded) until the router lists every one as healthy.
  void start();
  void stop();

  // POST /v1/generate; returns {status, json body}.
  std::pair<int, nlohmann::json> generate(const nlohmann::json& request) const;
  std::pair<int, std::string> post_raw(const std::string& path, const std::string& body) const;
  std::pair<int, std::string> get_raw(const std::string& path) const;
  nlohmann::json instances() const;
  nlohmann::json stats() const;  // GET /v1/stats
  // The /v1/instances entry of `id` (null if not listed).
  nlohmann::json instance(const std::string& id) const;
  // The entry of `id` once `ready` holds for it (heartbeat figures lag by up to one interval); the last one
  // seen when it does not within `timeout_ms`.
  nlohmann::json instance_when(const std::string& id, const std::function<bool(const nlohmann::json&)>& ready,
                               int timeout_ms = 5000) const;
  pid_t pid(const std::string& id) const;
  // Waits until every KV page and embedding slot is free again; returns the last /v1/instances seen.
  nlohmann::json wait_all_free(int timeout_ms = 8000) const;

  std::string control_endpoint(const std::string& id) const;
  int http_port() const { return http_port_; }
  // "http://127.0.0.1:PORT", or https with spec.tls.
  std::string base_url() const;
  // With spec.tls: the PEM file of the CA that signed the router's certificate.
  std::filesystem::path ca_file() const { return dir_ / "ca.pem"; }
  // With spec.metrics: the port of `id`'s /metrics, and one scrape of it (the text; throws on failure).
  int metrics_port(const std::string& id) const;
  std::string scrape(const std::string& id) const;
  std::vector<std::string> ids() const;
  launcher::ProcessGroup& group() { return *group_; }
  std::string logs() const { return sink_->text(); }
  launcher::OutputSink& sink() { return *sink_; }  // the children's log, for the launcher's own lines
  // Stops the cluster and returns the sanitizer reports (ASan, LSan, UBSan) its processes printed, if any:
  // with EPD_SANITIZE=ON the role processes are instrumented too, and their reports must fail the test.
  std::string stop_and_collect_sanitizer_reports();
  const std::filesystem::path& config_file() const { return config_; }
  // The cluster's temp directory (its config, and with spec.curve its keys/).
  const std::filesystem::path& dir() const { return dir_; }

 private:
  httplib::Client client() const;
  ClusterSpec spec_;
  std::filesystem::path dir_, config_;
  int http_port_ = 0;
  std::vector<std::pair<std::string, std::string>> instances_;  // id, role
  std::vector<std::pair<std::string, int>> control_ports_;
  std::map<std::string, int> metrics_ports_;
  std::shared_ptr<MemorySink> sink_ = std::make_shared<MemorySink>();
  std::unique_ptr<launcher::ProcessGroup> group_;
};

int free_port();

// The sum of every series of the metric `name` in a scrape's text (0 when it has none).
double metric_sum(const std::string& scrape, const std::string& name);

}  // namespace epd::testing

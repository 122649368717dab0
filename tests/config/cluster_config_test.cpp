#include <catch2/catch.hpp>
#include <filesystem>
#include <string>

#include "epd/config/cluster_config.hpp"

using namespace epd::config;
using epd::protocol::ErrorCode;

namespace {

const std::filesystem::path kFile = "/etc/epd/test.toml";

// A valid two-instance cluster; tests append or prepend the part they vary.
const std::string kInstances = R"(
[[instance]]
id = "router"
role = "router"
control = "tcp://127.0.0.1:17100"

[[instance]]
id = "decode-0"
role = "decode"
control = "tcp://127.0.0.1:17103"
)";

Result<ClusterConfig> parse(const std::string& text) {
  return parse_cluster_config(text, kFile);
}

// The config must be refused as config_error, with a message naming the file and every word of `names`.
void check_refused(const std::string& text, std::initializer_list<std::string> names) {
  auto cfg = parse(text);
  INFO(text);
  REQUIRE_FALSE(cfg.ok());
  CHECK(cfg.error().code == ErrorCode::config_error);
  const std::string& detail = cfg.error().detail;
  INFO(detail);
  CHECK(detail.find(kFile.string()) != std::string::npos);
  for (const auto& n : names) CHECK(detail.find(n) != std::string::npos);
}

}  // namespace

TEST_CASE("every cluster config in configs/ loads and names its registry", "[config]") {
  int clusters = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::string(EPD_SOURCE_DIR) + "/configs")) {
    const auto name = entry.path().filename().string();
    if (entry.path().extension() != ".toml" || name.rfind("model-", 0) == 0) continue;  // model files
    INFO(name);
    auto cfg = load_cluster_config(entry.path());
    REQUIRE(cfg.ok());
    CHECK(cfg->file == entry.path());
    REQUIRE((cfg->uses_etcd() ? !cfg->cluster.etcd_endpoints.empty() : cfg->registry() != nullptr));
    CHECK_FALSE(cfg->with_role("prefill").empty());
    CHECK_FALSE(cfg->with_role("decode").empty());
    for (const auto& inst : cfg->instances) CHECK(engine_config_for(inst).ok());
    ++clusters;
  }
  CHECK(clusters >= 5);
}

TEST_CASE("configs/local.toml: sections, role defaults and instances as written", "[config]") {
  auto cfg = load_cluster_config(std::string(EPD_SOURCE_DIR) + "/configs/local.toml");
  REQUIRE(cfg.ok());
  CHECK(cfg->cluster.name == "local");
  CHECK(cfg->cluster.registry == "router");
  CHECK(cfg->cluster.heartbeat_interval == std::chrono::milliseconds(500));
  // The demo model, relative to the cluster file.
  CHECK(cfg->model.path == std::string(EPD_SOURCE_DIR) + "/configs/../tools/demo-model/out/lm.gguf");
  CHECK(cfg->model.mmproj == std::string(EPD_SOURCE_DIR) + "/configs/../tools/demo-model/out/mmproj.gguf");
  REQUIRE(cfg->instances.size() == 4);
  const auto* decode = cfg->find("decode-0");
  REQUIRE(decode);
  CHECK(decode->role == "decode");
  CHECK(decode->control == "tcp://127.0.0.1:17103");
  CHECK(*decode->settings.get_uint("kv_pages", 0) == 1024);  // from [defaults.decode]
  CHECK(*cfg->find("router")->settings.get_string("http", "") == "127.0.0.1:18100");
  CHECK(cfg->find("nobody") == nullptr);
}

TEST_CASE("absent sections and keys take their documented defaults", "[config]") {
  auto cfg = parse(kInstances);
  REQUIRE(cfg.ok());
  const ClusterSection defaults;
  CHECK(cfg->cluster.name == "epd");
  CHECK(cfg->cluster.registry == "router");
  CHECK(cfg->cluster.heartbeat_interval == defaults.heartbeat_interval);
  CHECK(cfg->cluster.heartbeat_misses == 3);
  CHECK(cfg->cluster.request_timeout == std::chrono::milliseconds(60000));
  CHECK(cfg->cluster.max_attempts == 3);
  CHECK(cfg->cluster.drain_timeout == std::chrono::milliseconds(4000));
  CHECK(cfg->model.preset == "tiny");
  CHECK(cfg->model.path.empty());
  const auto& d = cfg->instances[1];
  CHECK_FALSE(d.settings.has("kv_pages"));
  CHECK(*d.settings.get_uint("kv_pages", 77) == 77);
  auto engine = engine_config_for(d);
  REQUIRE(engine.ok());
  CHECK(engine->instance_id == "decode-0");
  CHECK_FALSE(engine->force.has_value());  // backend = auto
  CHECK_FALSE(engine->fault.enabled);
}

TEST_CASE("[cluster] and [model] keys are read", "[config]") {
  auto cfg = parse(R"(
[cluster]
name = "c1"
registry = "decode-0"
heartbeat_interval_ms = 250
heartbeat_misses = 5
request_timeout_ms = 1500
max_attempts = 7
drain_timeout_ms = 900
[model]
path = "models/small.toml"
mmproj = "models/mmproj.gguf"
)" + kInstances);
  REQUIRE(cfg.ok());
  CHECK(cfg->cluster.name == "c1");
  CHECK(cfg->registry()->id == "decode-0");
  CHECK(cfg->cluster.heartbeat_interval == std::chrono::milliseconds(250));
  CHECK(cfg->cluster.heartbeat_misses == 5);
  CHECK(cfg->cluster.request_timeout == std::chrono::milliseconds(1500));
  CHECK(cfg->cluster.max_attempts == 7);
  CHECK(cfg->model.path == std::filesystem::path("/etc/epd/models/small.toml"));  // next to the file
  CHECK(cfg->model.mmproj == std::filesystem::path("/etc/epd/models/mmproj.gguf"));
  CHECK(cfg->cluster.drain_timeout == std::chrono::milliseconds(900));
  check_refused("[model]\nmmproj = \"m.gguf\"\n" + kInstances, {"mmproj needs a path"});

  auto absolute = parse("[model]\npath = \"/opt/m.toml\"\n" + kInstances);
  REQUIRE(absolute.ok());
  CHECK(absolute->model.path == std::filesystem::path("/opt/m.toml"));
}

TEST_CASE("defaults.<role> is inherited and an instance's own keys win", "[config]") {
  auto cfg = parse(R"(
[transport]
backend = "tcp"
tcp_lanes = 3
[defaults.decode]
kv_pages = 100
max_batch = 8
[defaults.prefill]
kv_pages = 999
)" + kInstances + R"(
[[instance]]
id = "decode-1"
role = "decode"
control = "tcp://127.0.0.1:17104"
max_batch = 2
[instance.transport]
tcp_lanes = 5
)");
  REQUIRE(cfg.ok());
  const auto* d0 = cfg->find("decode-0");
  const auto* d1 = cfg->find("decode-1");
  REQUIRE(d0);
  REQUIRE(d1);
  CHECK(*d0->settings.get_uint("kv_pages", 0) == 100);
  CHECK(*d0->settings.get_uint("max_batch", 0) == 8);
  CHECK(*d1->settings.get_uint("kv_pages", 0) == 100);
  CHECK(*d1->settings.get_uint("max_batch", 0) == 2);          // its own key
  CHECK_FALSE(cfg->find("router")->settings.has("kv_pages"));  // another role's defaults do not leak
  // The instance's identity keys are not role settings.
  for (auto key : {"id", "role", "control", "transport"}) CHECK_FALSE(d1->settings.has(key));
  // [transport] is inherited the same way, [instance.transport] wins.
  CHECK(*engine_config_for(*d0)->options.get_uint("tcp_lanes", 0) == 3);
  CHECK(*engine_config_for(*d1)->options.get_uint("tcp_lanes", 0) == 5);
  CHECK(engine_config_for(*d1)->force.has_value());
  CHECK(cfg->with_role("decode").size() == 2);
}

TEST_CASE("broken TOML is refused with the file and line", "[config][errors]") {
  check_refused("[cluster\nname = 1\n", {"line 1"});
  check_refused(kInstances + "\nid = \n", {"line 12"});
}

TEST_CASE("a missing file is refused with its path", "[config][errors]") {
  auto cfg = load_cluster_config("/nonexistent/epd/cluster.toml");
  REQUIRE_FALSE(cfg.ok());
  CHECK(cfg.error().code == ErrorCode::config_error);
  CHECK(cfg.error().detail.find("/nonexistent/epd/cluster.toml") != std::string::npos);
}

TEST_CASE("unknown sections and keys are refused by name", "[config][errors]") {
  check_refused("[clustre]\nname = \"x\"\n" + kInstances, {"unknown section", "'clustre'"});
  check_refused("[cluster]\nheartbeat_ms = 5\n" + kInstances, {"[cluster]", "'heartbeat_ms'", "typo"});
  check_refused("[model]\npreset = \"tiny\"\nweights = \"w\"\n" + kInstances, {"[model]", "'weights'"});
  // Transport keys are checked for every instance when the file is loaded.
  check_refused("[transport]\ntcp_lane = 2\n" + kInstances, {"'tcp_lane'", "transport"});
  check_refused(kInstances + "[instance.transport]\nbackend = \"carrier-pigeon\"\n",
                {"decode-0", "'backend'", "carrier-pigeon"});
}

TEST_CASE("values of the wrong type are refused by key", "[config][errors]") {
  check_refused("[cluster]\nheartbeat_misses = \"3\"\n" + kInstances, {"'heartbeat_misses'", "integer"});
  check_refused("[cluster]\nname = 5\n" + kInstances, {"'name'", "string"});
  check_refused("[cluster]\nrequest_timeout_ms = 1.5\n" + kInstances, {"'request_timeout_ms'", "integer"});
  check_refused("[transport]\nfault_error_rate = \"high\"\n" + kInstances, {"'fault_error_rate'", "number"});
  check_refused("instance = 3\n", {"no [[instance]]"});
  check_refused("instance = [1]\n", {"#1", "not a table"});
  check_refused(R"([[instance]]
id = "router"
role = 4
control = "tcp://127.0.0.1:1"
)",
                {"#1", "'role'", "string"});
}

TEST_CASE("out-of-range values are refused with the allowed range", "[config][errors]") {
  check_refused("[cluster]\nheartbeat_misses = 0\n" + kInstances,
                {"'heartbeat_misses'", "[1, 1000]", "got 0"});
  check_refused("[cluster]\nmax_attempts = 101\n" + kInstances, {"'max_attempts'", "[1, 100]", "got 101"});
  check_refused("[cluster]\nheartbeat_interval_ms = 0\n" + kInstances, {"heartbeat_interval_ms", "> 0"});
  check_refused("[cluster]\nrequest_timeout_ms = -1\n" + kInstances, {"'request_timeout_ms'", "got -1"});
  check_refused("[transport]\ntcp_port = 70000\n" + kInstances, {"'tcp_port'", "65535"});
  check_refused("[transport]\nfault_error_rate = 1.5\n" + kInstances, {"fault_error_rate", "[0, 1]"});
}

TEST_CASE("instance lists: missing keys, duplicates and dangling registry are refused", "[config][errors]") {
  check_refused("[cluster]\nname = \"x\"\n", {"no [[instance]]"});
  check_refused("[[instance]]\nrole = \"decode\"\ncontrol = \"tcp://127.0.0.1:1\"\n", {"#1", "'id'"});
  check_refused("[[instance]]\nid = \"router\"\ncontrol = \"tcp://127.0.0.1:1\"\n", {"'router'", "'role'"});
  check_refused("[[instance]]\nid = \"router\"\nrole = \"router\"\n", {"'router'", "'control'"});
  check_refused("[[instance]]\nid = \"router\"\nrole = \"router\"\ncontrol = \"udp://x:1\"\n",
                {"'control'", "udp://x:1"});
  check_refused("[[instance]]\nid = \"has space\"\nrole = \"router\"\ncontrol = \"tcp://127.0.0.1:1\"\n",
                {"#1", "'id'"});
  check_refused(
      kInstances + "[[instance]]\nid = \"decode-0\"\nrole = \"decode\"\ncontrol = \"tcp://127.0.0.1:1\"\n",
      {"duplicate instance id", "'decode-0'"});
  check_refused(
      kInstances +
          "[[instance]]\nid = \"decode-1\"\nrole = \"decode\"\ncontrol = \"tcp://127.0.0.1:17103\"\n",
      {"'decode-1'", "tcp://127.0.0.1:17103", "used twice"});
  check_refused("[cluster]\nregistry = \"registry-0\"\n" + kInstances,
                {"registry", "'registry-0'", "names no instance"});
}

TEST_CASE("an instance's metrics address is read, checked and kept out of its role settings", "[config]") {
  auto cfg = parse(kInstances + "metrics = \"127.0.0.1:9464\"\n");
  REQUIRE(cfg.ok());
  const auto* decode = cfg->find("decode-0");
  REQUIRE(decode->metrics);
  CHECK(decode->metrics->host == "127.0.0.1");
  CHECK(decode->metrics->port == 9464);
  CHECK_FALSE(cfg->find("router")->metrics);   // off when absent
  CHECK(decode->settings.only_keys({}).ok());  // not a role setting
  check_refused(kInstances + "metrics = \"9464\"\n", {"decode-0", "metrics", "HOST:PORT", "9464"});
  check_refused(kInstances + "metrics = \"127.0.0.1:70000\"\n", {"metrics", "HOST:PORT"});
  check_refused(kInstances + "metrics = \"127.0.0.1:\"\n", {"metrics", "HOST:PORT"});
  check_refused(kInstances + "metrics = 9464\n", {"metrics"});
  const std::string twice = R"(
[[instance]]
id = "router"
role = "router"
control = "tcp://127.0.0.1:17100"
metrics = "127.0.0.1:9464"

[[instance]]
id = "decode-0"
role = "decode"
control = "tcp://127.0.0.1:17103"
metrics = "127.0.0.1:9464"
)";
  check_refused(twice, {"decode-0", "127.0.0.1:9464", "used twice"});
}

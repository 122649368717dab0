// registry = "etcd": the keys it needs, their defaults and checks, and [etcd] local.
#include <catch2/catch.hpp>
#include <string>

#include "epd/config/cluster_config.hpp"

using namespace epd::config;
using epd::protocol::ErrorCode;

namespace {

const std::filesystem::path kEtcdFile = "/etc/epd/etcd.toml";

const std::string kEtcdInstances = R"(
[[instance]]
id = "router-0"
role = "router"
control = "tcp://127.0.0.1:17100"

[[instance]]
id = "decode-0"
role = "decode"
control = "tcp://127.0.0.1:17103"
)";

void check_etcd_refused(const std::string& text, std::initializer_list<std::string> names) {
  auto cfg = parse_cluster_config(text + kEtcdInstances, kEtcdFile);
  INFO(text);
  REQUIRE_FALSE(cfg.ok());
  CHECK(cfg.error().code == ErrorCode::config_error);
  INFO(cfg.error().detail);
  CHECK(cfg.error().detail.find(kEtcdFile.string()) != std::string::npos);
  for (const auto& n : names) CHECK(cfg.error().detail.find(n) != std::string::npos);
}

}  // namespace

TEST_CASE("registry etcd reads its endpoints and takes the documented defaults", "[config]") {
  auto cfg = parse_cluster_config(R"([cluster]
name = "c1"
registry = "etcd"
etcd_endpoints = ["http://127.0.0.1:2379", "http://10.0.0.2:2379/"]
)" + kEtcdInstances,
                                  kEtcdFile);
  REQUIRE(cfg.ok());
  CHECK(cfg->uses_etcd());
  CHECK(cfg->registry() == nullptr);
  CHECK(cfg->cluster.etcd_endpoints ==
        std::vector<std::string>{"http://127.0.0.1:2379", "http://10.0.0.2:2379/"});
  CHECK(cfg->cluster.etcd_prefix == "/epd/c1/");
  CHECK(cfg->cluster.etcd_lease_ttl == std::chrono::milliseconds(5000));
  CHECK_FALSE(cfg->cluster.etcd_routers_watch);  // every instance watches unless told otherwise
  CHECK_FALSE(cfg->etcd.local);

  cfg = parse_cluster_config(R"([cluster]
registry = "etcd"
etcd_endpoints = ["http://127.0.0.1:2379"]
etcd_prefix = "/prod/a/"
etcd_lease_ttl_ms = 2000
etcd_watch = "routers"
[etcd]
local = true
peer = "127.0.0.1:2380"
data_dir = "etcd-data"
)" + kEtcdInstances,
                             kEtcdFile);
  REQUIRE(cfg.ok());
  CHECK(cfg->cluster.etcd_prefix == "/prod/a/");
  CHECK(cfg->cluster.etcd_lease_ttl == std::chrono::milliseconds(2000));
  CHECK(cfg->cluster.etcd_routers_watch);
  CHECK(cfg->etcd.local);
  CHECK(cfg->etcd.peer.port == 2380);
  CHECK(cfg->etcd.data_dir == "/etc/epd/etcd-data");
}

TEST_CASE("registry etcd refuses missing or malformed etcd keys by name", "[config][errors]") {
  check_etcd_refused("[cluster]\nregistry = \"etcd\"\n", {"etcd_endpoints"});
  check_etcd_refused("[cluster]\nregistry = \"etcd\"\netcd_endpoints = []\n", {"etcd_endpoints"});
  check_etcd_refused("[cluster]\nregistry = \"etcd\"\netcd_endpoints = \"http://127.0.0.1:2379\"\n",
                     {"etcd_endpoints"});
  check_etcd_refused("[cluster]\nregistry = \"etcd\"\netcd_endpoints = [2379]\n",
                     {"etcd_endpoints", "strings"});
  check_etcd_refused("[cluster]\nregistry = \"etcd\"\netcd_endpoints = [\"127.0.0.1:2379\"]\n",
                     {"etcd_endpoints", "127.0.0.1:2379", "http://"});
  check_etcd_refused("[cluster]\nregistry = \"etcd\"\netcd_endpoints = [\"http://127.0.0.1\"]\n",
                     {"etcd_endpoints"});
  check_etcd_refused(
      "[cluster]\nregistry = \"etcd\"\netcd_endpoints = [\"http://h:1\"]\netcd_prefix = \"epd\"\n",
      {"etcd_prefix", "'/'"});
  check_etcd_refused(
      "[cluster]\nregistry = \"etcd\"\netcd_endpoints = [\"http://h:1\"]\netcd_lease_ttl_ms = 2500\n",
      {"etcd_lease_ttl_ms", "2500"});
  check_etcd_refused(
      "[cluster]\nregistry = \"etcd\"\netcd_endpoints = [\"http://h:1\"]\netcd_lease_ttl_ms = 1000\n",
      {"etcd_lease_ttl_ms", "2000"});
  check_etcd_refused(
      "[cluster]\nregistry = \"etcd\"\netcd_endpoints = [\"http://h:1\"]\netcd_watch = \"all\"\n",
      {"etcd_watch", "'all'", "\"routers\""});
  check_etcd_refused("[cluster]\nregistry = \"router-0\"\netcd_watch = \"routers\"\n",
                     {"etcd_watch", "registry = \"etcd\""});
  // etcd keys without registry = "etcd" would be ignored silently: refused instead.
  check_etcd_refused("[cluster]\nregistry = \"router-0\"\netcd_endpoints = [\"http://h:1\"]\n",
                     {"etcd_endpoints", "registry = \"etcd\""});
  // A registry that is neither an instance nor etcd says both choices.
  check_etcd_refused("[cluster]\nregistry = \"nobody\"\n", {"nobody", "etcd"});
}

TEST_CASE("etcd local needs registry etcd a loopback endpoint and a peer port", "[config][errors]") {
  const std::string base = "[cluster]\nregistry = \"etcd\"\netcd_endpoints = [\"http://127.0.0.1:2379\"]\n";
  check_etcd_refused(base + "[etcd]\nlocal = true\n", {"peer"});
  check_etcd_refused(base + "[etcd]\nlocal = true\npeer = \"127.0.0.1:2379\"\n", {"peer", "client port"});
  check_etcd_refused(base + "[etcd]\nlocal = true\npeer = \"10.1.1.1:2380\"\n", {"peer", "loopback"});
  check_etcd_refused(base + "[etcd]\nlocal = true\npeer = \"127.0.0.1:2380\"\nextra = 1\n", {"extra"});
  check_etcd_refused(
      "[cluster]\nregistry = \"etcd\"\netcd_endpoints = [\"http://10.0.0.1:2379\"]\n[etcd]\nlocal = "
      "true\npeer = \"127.0.0.1:2380\"\n",
      {"loopback", "10.0.0.1"});
  check_etcd_refused("[cluster]\nregistry = \"router-0\"\n[etcd]\nlocal = true\npeer = \"127.0.0.1:2380\"\n",
                     {"registry = \"etcd\""});
}

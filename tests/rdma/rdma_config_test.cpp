// The rdma keys of a cluster config reach the backend's settings: [transport] for every instance,
// [instance.transport] winning for one; bad values are refused when the file is loaded, naming the key.
#include <catch2/catch.hpp>
#include <string>

#include "epd/config/cluster_config.hpp"
#include "rdma_options.hpp"

using namespace epd;
using namespace std::chrono_literals;

namespace {

const std::string kCluster = R"(
[transport]
backend = "rdma"
host = "::1"
rdma_max_outstanding_wr = 16
rdma_op_timeout_ms = 750
rdma_handshake_port = 19999
rdma_gid_index = 3

[[instance]]
id = "router"
role = "router"
control = "tcp://127.0.0.1:17100"

[[instance]]
id = "decode-0"
role = "decode"
control = "tcp://127.0.0.1:17103"
[instance.transport]
rdma_gid_index = 1
rdma_handshake_port = 20001
)";

transport::rdma::RdmaConfig rdma_config_of(const config::ClusterConfig& cfg, const std::string& id) {
  const auto* inst = cfg.find(id);
  REQUIRE(inst);
  auto engine = config::engine_config_for(*inst);
  REQUIRE(engine.ok());
  auto rdma = transport::rdma::parse_rdma_options(engine->options, engine->host);
  REQUIRE(rdma.ok());
  return *rdma;
}

}  // namespace

TEST_CASE("rdma config: outstanding WRs, op timeout, handshake port and GID index from the cluster file",
          "[rdma][unit]") {
  auto cfg = config::parse_cluster_config(kCluster, "/etc/epd/rdma.toml");
  INFO((cfg.ok() ? std::string() : cfg.error().detail));
  REQUIRE(cfg.ok());
  const auto router = rdma_config_of(*cfg, "router");
  CHECK(router.max_outstanding_wr == 16);
  CHECK(router.op_timeout == 750ms);
  CHECK(router.handshake_port == 19999);
  CHECK(router.gid_index == 3);
  CHECK(router.handshake_host == "::1");  // the engine's host
  const auto decode = rdma_config_of(*cfg, "decode-0");
  CHECK(decode.max_outstanding_wr == 16);  // inherited
  CHECK(decode.op_timeout == 750ms);
  CHECK(decode.gid_index == 1);  // its own keys win
  CHECK(decode.handshake_port == 20001);
}

TEST_CASE("rdma config: out-of-range values are refused with the file and the key", "[rdma][unit]") {
  for (const std::string bad : {"rdma_max_outstanding_wr = 0", "rdma_handshake_port = 70000",
                                "rdma_gid_index = 256", "rdma_op_timeout_ms = \"soon\""}) {
    auto cfg = config::parse_cluster_config(
        "[transport]\n" + bad + "\n" + kCluster.substr(kCluster.find("[[")), "/etc/epd/rdma.toml");
    INFO(bad);
    REQUIRE_FALSE(cfg.ok());
    const std::string key = bad.substr(0, bad.find(' '));
    INFO(cfg.error().detail);
    CHECK(cfg.error().detail.find(key) != std::string::npos);
    CHECK(cfg.error().detail.find("/etc/epd/rdma.toml") != std::string::npos);
  }
}

// The cluster config parser (config/src/: TOML via toml++, then validation into ClusterConfig and each
// instance's transport settings via the backend registry). Invariants: parsing never throws; a config it
// accepts satisfies the rules it promises (at least one instance, unique valid ids and control endpoints, a
// registry that names an instance, the [cluster] ranges, transport settings every instance can start with);
// a refusal is config_error.
#include <set>

#include "epd/config/cluster_config.hpp"
#include "epd/protocol/codec.hpp"
#include "fuzz_check.hpp"

using namespace epd::config;
using epd::protocol::ErrorCode;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto cfg = parse_cluster_config(text, "/fuzz/cluster.toml");
  if (!cfg) {
    FUZZ_CHECK(cfg.error().code == ErrorCode::config_error);
    FUZZ_CHECK(!cfg.error().detail.empty());
    return 0;
  }
  FUZZ_CHECK(!cfg->instances.empty());
  FUZZ_CHECK(cfg->uses_etcd() ? !cfg->cluster.etcd_endpoints.empty() : cfg->registry() != nullptr);
  const auto& c = cfg->cluster;
  FUZZ_CHECK(c.heartbeat_interval.count() > 0);
  FUZZ_CHECK(c.heartbeat_misses >= 1 && c.heartbeat_misses <= 1000);
  FUZZ_CHECK(c.max_attempts >= 1 && c.max_attempts <= 100);
  std::set<std::string> ids, controls;
  for (const auto& inst : cfg->instances) {
    FUZZ_CHECK(epd::protocol::valid_instance_id(inst.id));
    FUZZ_CHECK(ids.insert(inst.id).second);
    FUZZ_CHECK(!inst.role.empty());
    FUZZ_CHECK(controls.insert(inst.control).second);
    FUZZ_CHECK(inst.control.starts_with("tcp://") || inst.control.starts_with("ipc://"));
    FUZZ_CHECK(engine_config_for(inst).ok());
    FUZZ_CHECK(cfg->find(inst.id) != nullptr);
  }
  return 0;
}

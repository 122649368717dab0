#include "cluster.hpp"

#include <httplib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "epd/actors/role_support.hpp"

namespace epd::bench {

std::pair<std::string, int> http_address(const config::InstanceConfig& router) {
  auto http = router.settings.get_string("http", "127.0.0.1:8080");
  return {http->substr(0, http->rfind(':')), std::stoi(http->substr(http->rfind(':') + 1))};
}

std::pair<std::string, int> router_address(const config::ClusterConfig& cfg) {
  // The embedded registry's router, or (membership in etcd) the first router.
  const auto* router = cfg.registry();
  if (!router && !cfg.with_role("router").empty()) router = cfg.with_role("router").front();
  return router ? http_address(*router) : std::pair<std::string, int>{"127.0.0.1", 8080};
}

std::string sibling_executable(const std::string& name) {
  char self[4096];
  const ssize_t n = ::readlink("/proc/self/exe", self, sizeof self - 1);
  return (std::filesystem::path(std::string(self, size_t(std::max<ssize_t>(n, 0)))).parent_path() / name)
      .string();
}

std::unique_ptr<launcher::ProcessGroup> start_cluster(const std::string& config, const std::string& host,
                                                      int port, size_t instances) {
  launcher::GroupOptions opts;
  opts.restart.enabled = false;
  auto group = std::make_unique<launcher::ProcessGroup>(opts, std::make_shared<launcher::FdSink>(2));
  if (auto st = group->start({{"epd-cluster", {sibling_executable("epd-cluster"), "--config", config}}});
      !st) {
    std::fprintf(stderr, "cannot start the cluster: %s\n", st.error().to_string().c_str());
    return nullptr;
  }
  httplib::Client c(host, port);
  for (int i = 0; i < 600; ++i) {
    if (auto r = c.Get("/v1/instances"); r && r->status == 200) {
      auto j = nlohmann::json::parse(r->body, nullptr, false);
      size_t healthy = 0;
      for (const auto& e : j)
        if (e.value("healthy", false)) ++healthy;
      if (healthy >= instances) return group;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  std::fprintf(stderr, "the cluster did not become ready\n");
  return nullptr;
}

std::optional<BenchConfig> load_bench_config(const std::string& path) {
  auto cfg = config::load_cluster_config(path);
  if (!cfg) {
    std::fprintf(stderr, "%s\n", cfg.error().detail.c_str());
    return std::nullopt;
  }
  auto model_cfg = actors::model_for(*cfg);
  if (!model_cfg) {
    std::fprintf(stderr, "model: %s\n", model_cfg.error().detail.c_str());
    return std::nullopt;
  }
  return BenchConfig{std::move(*cfg), std::move(*model_cfg)};
}

std::optional<toml::table> read_config_toml(const std::string& path) {
  try {
    return toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(e.description()).c_str());
    return std::nullopt;
  }
}

toml::table& role_defaults(toml::table& config, const char* role) {
  if (!config["defaults"].as_table()) config.insert_or_assign("defaults", toml::table{});
  auto& defaults = *config["defaults"].as_table();
  if (!defaults[role].as_table()) defaults.insert_or_assign(role, toml::table{});
  return *defaults[role].as_table();
}

std::optional<std::string> write_config_toml(const toml::table& config, const std::filesystem::path& dir,
                                             const std::string& name) {
  const auto out = dir / (name + ".toml");
  std::ofstream f(out);
  f << config << "\n";
  if (!f) {
    std::fprintf(stderr, "cannot write %s\n", out.c_str());
    return std::nullopt;
  }
  return out.string();
}

double metric_total(const config::ClusterConfig& cfg, const char* role, const std::string& name) {
  double sum = 0;
  for (const auto* inst : cfg.with_role(role)) {
    if (!inst->metrics) continue;
    httplib::Client c(inst->metrics->host, inst->metrics->port);
    auto r = c.Get("/metrics");
    if (!r || r->status != 200) continue;
    std::istringstream in(r->body);
    for (std::string line; std::getline(in, line);)
      if (line.rfind(name + "{", 0) == 0 || line.rfind(name + " ", 0) == 0)
        sum += std::stod(line.substr(line.rfind(' ') + 1));
  }
  return sum;
}

}  // namespace epd::bench

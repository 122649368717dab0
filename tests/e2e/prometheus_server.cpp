#include "prometheus_server.hpp"

#include <unistd.h>

#include <httplib.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <thread>

namespace epd::testing {

namespace {

constexpr const char* kPrometheus = "/usr/bin/prometheus";
constexpr const char* kPromtool = "/usr/bin/promtool";

std::string url_encode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += char(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

}  // namespace

PrometheusServer::PrometheusServer(std::vector<std::string> targets, std::vector<std::filesystem::path> rules,
                                   ScrapeAuth auth)
    : targets_(std::move(targets)), rule_files_(std::move(rules)), auth_(std::move(auth)) {
  dir_ = std::filesystem::temp_directory_path() /
         ("epd-prometheus-" + std::to_string(::getpid()) + "-" + std::to_string(free_port()));
  std::filesystem::create_directories(dir_ / "data");
}

PrometheusServer::~PrometheusServer() {
  if (group_) group_->stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void PrometheusServer::start() {
  if (::access(kPrometheus, X_OK) != 0)
    throw std::runtime_error(std::string(kPrometheus) +
                             " is missing: scripts/setup-deps installs Debian's prometheus");
  std::ofstream cfg(dir_ / "prometheus.yml");
  cfg << "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n";
  if (!rule_files_.empty()) {
    cfg << "rule_files:\n";
    for (const auto& f : rule_files_) cfg << "  - " << f.string() << "\n";
  }
  cfg << "scrape_configs:\n  - job_name: epd\n";
  if (!auth_.ca_file.empty())
    cfg << "    scheme: https\n    tls_config:\n      ca_file: " << auth_.ca_file.string() << "\n";
  if (!auth_.bearer_key.empty()) {
    const auto key_file = dir_ / "scrape.key";
    std::ofstream(key_file) << auth_.bearer_key << "\n";
    std::filesystem::permissions(key_file,
                                 std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    cfg << "    authorization:\n      credentials_file: " << key_file.string() << "\n";
  }
  cfg << "    static_configs:\n      - targets: [";
  for (size_t i = 0; i < targets_.size(); ++i) cfg << (i ? ", " : "") << "'" << targets_[i] << "'";
  cfg << "]\n";
  cfg.close();
  port_ = free_port();
  launcher::GroupOptions opts;
  opts.restart.enabled = false;
  opts.stop_grace = std::chrono::milliseconds(3000);
  group_ = std::make_unique<launcher::ProcessGroup>(opts, sink_);
  std::vector<launcher::ChildSpec> children{
      {"prometheus",
       {kPrometheus, "--config.file=" + (dir_ / "prometheus.yml").string(),
        "--storage.tsdb.path=" + (dir_ / "data").string(),
        "--web.listen-address=127.0.0.1:" + std::to_string(port_), "--log.level=warn"}}};
  if (auto st = group_->start(std::move(children)); !st) throw std::runtime_error(st.error().to_string());
  httplib::Client c("127.0.0.1", port_);
  c.set_connection_timeout(1, 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    if (auto r = c.Get("/-/ready"); r && r->status == 200) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  throw std::runtime_error("prometheus did not become ready within 30 s:\n" + logs());
}

nlohmann::json PrometheusServer::query(const std::string& expr) const {
  httplib::Client c("127.0.0.1", port_);
  c.set_read_timeout(10, 0);
  auto r = c.Get("/api/v1/query?query=" + url_encode(expr));
  if (!r) throw std::runtime_error("prometheus query failed: no answer");
  auto j = nlohmann::json::parse(r->body, nullptr, false);
  if (r->status != 200 || j.is_discarded() || j.value("status", "") != "success")
    throw std::runtime_error("prometheus query '" + expr + "' failed: " + r->body);
  return j["data"]["result"];
}

std::optional<double> PrometheusServer::value(const std::string& expr) const {
  auto result = query(expr);
  if (result.empty()) return std::nullopt;
  if (result.size() != 1) throw std::runtime_error("'" + expr + "' gave " + result.dump());
  return std::stod(result[0]["value"][1].get<std::string>());
}

std::optional<double> PrometheusServer::wait_for(const std::string& expr,
                                                 const std::function<bool(double)>& ok,
                                                 int timeout_ms) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  std::optional<double> v;
  while (true) {
    v = value(expr);
    if ((v && ok(*v)) || std::chrono::steady_clock::now() >= deadline) return v;
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

std::string promtool_check_metrics(const std::string& text) {
  const auto file = std::filesystem::temp_directory_path() / ("epd-promtool-" + std::to_string(::getpid()) +
                                                              "-" + std::to_string(free_port()) + ".txt");
  std::ofstream(file) << text;
  const std::string cmd = std::string(kPromtool) + " check metrics < " + file.string() + " 2>&1";
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return "cannot run " + std::string(kPromtool);
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int rc = ::pclose(p);
  std::filesystem::remove(file);
  if (rc != 0 && out.empty()) out = "promtool exited with status " + std::to_string(rc);
  return out;
}

}  // namespace epd::testing

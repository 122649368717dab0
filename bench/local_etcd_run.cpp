#include "local_etcd_run.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <cstdio>
#include <fstream>
#include <random>
#include <set>
#include <sstream>

#include "epd/etcd/local_etcd.hpp"
#include "epd/launcher/free_port.hpp"

namespace epd::bench {

int free_port() {
  return launcher::free_port();
}

void TailSink::write_line(std::string_view line) {
  std::lock_guard lock(mu_);
  ++lines_;
  tail_.emplace_back(line);
  if (tail_.size() > 20) tail_.pop_front();
}

std::string TailSink::text() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const auto& l : tail_) out += l + "\n";
  return out;
}

size_t TailSink::lines() const {
  std::lock_guard lock(mu_);
  return lines_;
}

LocalEtcdRun::LocalEtcdRun() {
  client_ = {"127.0.0.1", uint16_t(free_port())};
  peer_ = {"127.0.0.1", uint16_t(free_port())};
  std::string tmpl = (std::filesystem::temp_directory_path() / "epd-bench-etcd-XXXXXX").string();
  if (::mkdtemp(tmpl.data())) dir_ = tmpl;
}

LocalEtcdRun::~LocalEtcdRun() {
  stop();
  std::error_code ec;
  if (!dir_.empty()) std::filesystem::remove_all(dir_, ec);
}

bool LocalEtcdRun::start() {
  if (dir_.empty()) {
    std::fprintf(stderr, "etcd: cannot create a temporary directory\n");
    return false;
  }
  etcd::LocalEtcd spec;
  spec.name = "epd-bench";
  spec.client = client_;
  spec.peer = peer_;
  spec.data_dir = dir_ / "data";
  auto child = etcd::local_etcd_child(spec);
  if (!child) {
    std::fprintf(stderr, "etcd: %s\n", child.error().detail.c_str());
    return false;
  }
  launcher::GroupOptions opts;
  opts.restart.enabled = false;
  opts.stop_grace = std::chrono::milliseconds(2000);
  group_ = std::make_unique<launcher::ProcessGroup>(opts, sink_);
  if (auto st = group_->start({*child}); !st) {
    std::fprintf(stderr, "etcd: %s\n", st.error().to_string().c_str());
    return false;
  }
  if (auto st = etcd::wait_healthy(client_, std::chrono::seconds(20)); !st) {
    std::fprintf(stderr, "etcd: %s\n%s", st.error().detail.c_str(), sink_->text().c_str());
    return false;
  }
  return true;
}

void LocalEtcdRun::stop() {
  if (group_) group_->stop();
  group_.reset();
}

pid_t LocalEtcdRun::pid() const {
  if (!group_) return 0;
  auto s = group_->status("etcd");
  return s ? s->pid : 0;
}

std::string LocalEtcdRun::scrape() const {
  httplib::Client c(client_.host, client_.port);
  c.set_connection_timeout(2, 0);
  c.set_read_timeout(5, 0);
  auto r = c.Get("/metrics");
  return r && r->status == 200 ? r->body : std::string();
}

double LocalEtcdRun::metric(const std::string& text, const std::string& name) const {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.size() > name.size() && line.compare(0, name.size(), name) == 0 && line[name.size()] == ' ')
      return std::stod(line.substr(name.size() + 1));
  return 0;
}

}  // namespace epd::bench

#include "etcd_server.hpp"

#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>

#include "epd/etcd/local_etcd.hpp"

namespace epd::testing {

EtcdServer::EtcdServer() {
  client_ = {"127.0.0.1", uint16_t(free_port())};
  peer_ = {"127.0.0.1", uint16_t(free_port())};
  dir_ = std::filesystem::temp_directory_path() /
         ("epd-etcd-" + std::to_string(::getpid()) + "-" + std::to_string(client_.port));
  std::filesystem::create_directories(dir_);
}

EtcdServer::~EtcdServer() {
  stop();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void EtcdServer::start() {
  etcd::LocalEtcd spec;
  spec.client = client_;
  spec.peer = peer_;
  spec.data_dir = dir_ / "data";
  auto child = etcd::local_etcd_child(spec);
  if (!child) throw std::runtime_error(child.error().detail);
  launcher::GroupOptions opts;
  opts.restart.enabled = false;
  opts.stop_grace = std::chrono::milliseconds(2000);
  group_ = std::make_unique<launcher::ProcessGroup>(opts, sink_);
  if (auto st = group_->start({*child}); !st) throw std::runtime_error(st.error().to_string());
  if (auto st = etcd::wait_healthy(client_, std::chrono::seconds(20)); !st)
    throw std::runtime_error(st.error().detail + "\n" + logs());
}

void EtcdServer::stop() {
  if (!group_) return;
  if (frozen_) thaw();
  if (pid_t p = pid(); p > 0) ::kill(p, SIGKILL);
  group_->stop();
  group_.reset();
}

pid_t EtcdServer::pid() const {
  if (!group_) return 0;
  auto s = group_->status("etcd");
  return s ? s->pid : 0;
}

namespace {

// kill(SIGSTOP) can return before every thread has stopped. A suite run on a busy machine saw a put sent
// just after freeze() succeed, probably because one of etcd's threads ran on and answered it. Frozen means
// every thread of `pid` is in state T.
bool all_threads_stopped(pid_t pid) {
  const auto tasks = std::filesystem::path("/proc") / std::to_string(pid) / "task";
  std::error_code ec;
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    std::ifstream stat(task.path() / "stat");
    std::string line;
    std::getline(stat, line);
    const auto paren = line.rfind(')');  // the command name may hold spaces; the state follows it
    if (paren == std::string::npos || paren + 2 >= line.size() || line[paren + 2] != 'T') return false;
  }
  return !ec;
}

}  // namespace

void EtcdServer::freeze() {
  const pid_t p = pid();
  if (p <= 0 || ::kill(p, SIGSTOP) != 0) throw std::runtime_error("etcd: cannot SIGSTOP the server");
  frozen_ = true;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!all_threads_stopped(p)) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("etcd: the server did not stop within 5 s of SIGSTOP");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void EtcdServer::thaw() {
  if (pid_t p = pid(); p > 0) ::kill(p, SIGCONT);
  frozen_ = false;
}

double EtcdServer::keep_alive_metric(const std::string& name) const {
  httplib::Client c("127.0.0.1", client_.port);
  auto r = c.Get("/metrics");
  if (!r) throw std::runtime_error("etcd's /metrics did not answer");
  const std::regex line(name + R"(\{[^}]*grpc_method="LeaseKeepAlive"[^}]*\} ([0-9.e+]+))");
  std::smatch m;
  return std::regex_search(r->body, m, line) ? std::stod(m[1]) : 0.0;
}

}  // namespace epd::testing

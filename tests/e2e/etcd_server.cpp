#include "etcd_server.hpp"

#include <signal.h>
#include <unistd.h>

#include <stdexcept>

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

void EtcdServer::freeze() {
  if (pid_t p = pid(); p > 0 && ::kill(p, SIGSTOP) == 0) frozen_ = true;
}

void EtcdServer::thaw() {
  if (pid_t p = pid(); p > 0) ::kill(p, SIGCONT);
  frozen_ = false;
}

}  // namespace epd::testing

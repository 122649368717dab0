#pragma once
// A real single-member etcd (Debian's etcd-server) for tests: loopback ports from free_port(), data in a
// temporary directory, always stopped (process group) and removed. It can be frozen (SIGSTOP) and thawed
// to play an etcd outage without losing its data.
#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>

#include "cluster.hpp"
#include "epd/etcd/endpoint.hpp"

namespace epd::testing {

class EtcdServer {
 public:
  EtcdServer();
  ~EtcdServer();

  // Starts it and waits (bounded) until it serves; throws with its log when it does not.
  void start();
  // Kills it (SIGKILL through the process group); its data directory stays, so start() brings it back.
  void stop();
  void freeze();  // SIGSTOP, returning once every thread has stopped: connections stay open, nothing answers
  void thaw();    // SIGCONT

  std::string url() const { return client_.text(); }
  int client_port() const { return client_.port; }
  pid_t pid() const;
  std::string logs() const { return sink_->text(); }
  // A gRPC server counter of etcd's LeaseKeepAlive method, from its /metrics: "grpc_server_started_total"
  // (streams opened) or "grpc_server_msg_received_total" (renewals received); 0 before the first.
  double keep_alive_metric(const std::string& name) const;

 private:
  etcd::Endpoint client_, peer_;
  std::filesystem::path dir_;
  bool frozen_ = false;
  std::shared_ptr<MemorySink> sink_ = std::make_shared<MemorySink>();
  std::unique_ptr<launcher::ProcessGroup> group_;
};

}  // namespace epd::testing

#pragma once
// A real single-member etcd (Debian's etcd-server) that a benchmark owns: loopback ports below the
// ephemeral range, data in a temporary directory, stopped (and its directory removed) on destruction, its
// output kept (the last lines) for a report when something fails.
#include <sys/types.h>

#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "epd/etcd/endpoint.hpp"
#include "epd/launcher/process_group.hpp"

namespace epd::bench {

// launcher::free_port() (below the kernel's ephemeral range, never twice in this process).
int free_port();

// Keeps the last lines a child printed.
class TailSink final : public launcher::OutputSink {
 public:
  void write_line(std::string_view line) override;
  std::string text() const;
  size_t lines() const;

 private:
  mutable std::mutex mu_;
  std::deque<std::string> tail_;
  size_t lines_ = 0;
};

class LocalEtcdRun {
 public:
  LocalEtcdRun();
  ~LocalEtcdRun();  // stop()
  // Starts etcd and waits (at most 20 s) until it serves; false (with its output on stderr) if not.
  bool start();
  void stop();
  const etcd::Endpoint& client() const { return client_; }
  pid_t pid() const;
  // One scrape of etcd's /metrics: the value of an unlabelled sample, 0 when absent.
  double metric(const std::string& text, const std::string& name) const;
  std::string scrape() const;

 private:
  etcd::Endpoint client_, peer_;
  std::filesystem::path dir_;
  std::shared_ptr<TailSink> sink_ = std::make_shared<TailSink>();
  std::unique_ptr<launcher::ProcessGroup> group_;
};

}  // namespace epd::bench

#pragma once
// The registry's current table, readable from any thread (the router's HTTP threads and actors).
#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "epd/protocol/messages.hpp"

namespace epd::actors {

struct RegistryEntry {
  protocol::PeerInfo info;
  std::chrono::steady_clock::time_point last_seen;
};

class RegistryView {
 public:
  void set(std::map<std::string, RegistryEntry> entries) {
    std::lock_guard lock(mu_);
    entries_ = std::move(entries);
  }
  // One entry (a router's view under etcd membership changes one instance per heartbeat).
  void put(const std::string& id, RegistryEntry entry) {
    std::lock_guard lock(mu_);
    entries_[id] = std::move(entry);
  }
  std::vector<RegistryEntry> entries() const {
    std::lock_guard lock(mu_);
    std::vector<RegistryEntry> out;
    for (const auto& [_, e] : entries_) out.push_back(e);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, RegistryEntry> entries_;
};

}  // namespace epd::actors

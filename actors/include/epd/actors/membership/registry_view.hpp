#pragma once
// The registry's current table, readable from any thread (the router's HTTP threads and actors). The
// registry updates it in place, one entry per change or heartbeat: it never copies the whole table. It
// also remembers which entries changed, so the router's placement index follows them in O(changes)
// instead of reading the table per request (take_changes).
#include <algorithm>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "epd/protocol/messages.hpp"

namespace epd::actors {

struct RegistryEntry {
  protocol::PeerInfo info;
  protocol::LoadReport load;  // from its last HEARTBEAT (unhealthy until the first)
  std::chrono::steady_clock::time_point last_seen;
};

class RegistryView {
 public:
  void upsert(const RegistryEntry& entry) {
    std::lock_guard lock(mu_);
    entries_[entry.info.instance_id] = entry;
    changed_.insert(entry.info.instance_id);
  }
  void erase(const std::string& id) {
    std::lock_guard lock(mu_);
    entries_.erase(id);
    changed_.insert(id);
  }
  // A HEARTBEAT of a listed member: its figures and when it was heard.
  void update_load(const std::string& id, const protocol::LoadReport& load,
                   std::chrono::steady_clock::time_point seen) {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return;
    it->second.load = load;
    it->second.last_seen = seen;
    changed_.insert(id);
  }
  // Every member counts as heard at `seen` at the latest (the registry's own process stalled, so their
  // silence was not theirs).
  void seen_all_by(std::chrono::steady_clock::time_point seen) {
    std::lock_guard lock(mu_);
    for (auto& [_, e] : entries_) e.last_seen = std::max(e.last_seen, seen);
  }
  // The whole table at once (the full-list baseline of epd-bench membership copies it on every heartbeat).
  // Only the entries that differ count as changed.
  void set(std::map<std::string, RegistryEntry> entries) {
    std::lock_guard lock(mu_);
    for (const auto& [id, e] : entries) {
      auto old = entries_.find(id);
      if (old == entries_.end() || old->second.info != e.info || old->second.load != e.load)
        changed_.insert(id);
    }
    for (const auto& [id, _] : entries_)
      if (!entries.count(id)) changed_.insert(id);
    entries_ = std::move(entries);
  }
  // One entry (a router's view under etcd membership changes one instance per heartbeat).
  void put(const std::string& id, RegistryEntry entry) {
    std::lock_guard lock(mu_);
    entries_[id] = std::move(entry);
    changed_.insert(id);
  }
  // The entries changed since the last call, each once: `on_change(id, entry)`, with entry null if it is
  // gone. Called under the view's lock: `on_change` must not call back into the view. At most one reader
  // (the router actor) may take changes; until it does, they are kept (at most one per member).
  template <class F>
  void take_changes(F&& on_change) {
    std::lock_guard lock(mu_);
    for (const auto& id : changed_) {
      auto it = entries_.find(id);
      on_change(id, it == entries_.end() ? nullptr : &it->second);
    }
    changed_.clear();
  }
  std::optional<RegistryEntry> find(const std::string& id) const {
    std::lock_guard lock(mu_);
    auto it = entries_.find(id);
    if (it == entries_.end()) return std::nullopt;
    return it->second;
  }
  std::vector<RegistryEntry> entries() const {
    std::lock_guard lock(mu_);
    std::vector<RegistryEntry> out;
    out.reserve(entries_.size());
    for (const auto& [_, e] : entries_) out.push_back(e);
    return out;
  }

 private:
  mutable std::mutex mu_;
  std::map<std::string, RegistryEntry> entries_;
  std::unordered_set<std::string> changed_;  // ids whose entry changed since take_changes
};

}  // namespace epd::actors

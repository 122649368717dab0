#include "etcd_agent.hpp"

#include <spdlog/spdlog.h>

#include "instance_record.hpp"

namespace epd::actors::etcd_backend {

using std::chrono::milliseconds;

Agent::Agent(etcd::EtcdClient client, AgentConfig config, protocol::PeerInfo self, caf::actor membership)
    : client_(std::move(client)),
      config_(std::move(config)),
      self_(std::move(self)),
      membership_(std::move(membership)),
      keeper_(config_.keeper ? config_.keeper : std::make_shared<etcd::LeaseKeeper>(client_, config_.retry)) {
}

Agent::~Agent() {
  stop();
}

void Agent::start() {
  kept_ =
      keeper_->keep(instance_key(config_.prefix, self_.instance_id), encode_record(self_), config_.lease_ttl,
                    [membership = membership_](bool registered, const std::string& detail) {
                      caf::anon_send(membership, SessionNews{registered, detail});
                    });
  if (config_.watch) watcher_ = std::thread([this] { run_watcher(); });
}

void Agent::stop(bool revoke) {
  {
    // Under the lock, so that a sleeper that has just found stop_ false cannot miss the wake-up.
    std::lock_guard lock(sleep_mu_);
    if (stop_.exchange(true)) return;
  }
  woken_.notify_all();
  if (watcher_.joinable()) watcher_.join();
  if (kept_) keeper_->release(*kept_, revoke);
}

bool Agent::sleep_for(milliseconds d) {
  // Woken by stop() at once, and otherwise not at all.
  std::unique_lock lock(sleep_mu_);
  return !woken_.wait_for(lock, d, [&] { return stop_.load(); });
}

void Agent::run_watcher() {
  const std::string prefix = instances_prefix(config_.prefix);
  bool failing = false;
  auto trouble = [&](const std::string& what) {
    if (!failing) spdlog::warn("etcd: {}; keeping the membership we last saw", what);
    failing = true;
  };
  while (!stop_.load()) {
    auto listed = client_.range_prefix(prefix);
    if (!listed) {
      trouble("cannot list " + prefix + ": " + listed.error().detail);
      sleep_for(config_.retry);
      continue;
    }
    Listing listing;
    listing.revision = listed->revision;
    for (const auto& kv : listed->kvs) {
      auto id = id_of_key(config_.prefix, kv.key);
      if (!id) continue;
      auto info = decode_record(*id, kv.value);
      if (!info) {
        spdlog::warn("etcd: ignoring {}: {}", kv.key, info.error().detail);
        continue;
      }
      listing.peers.push_back(std::move(*info));
    }
    if (failing) spdlog::info("etcd: listing {} again at revision {}", prefix, listing.revision);
    failing = false;
    int64_t revision = listing.revision;
    caf::anon_send(membership_, std::move(listing));
    while (!stop_.load()) {
      auto end = client_.watch_prefix(
          prefix, revision + 1,
          [&](std::vector<etcd::WatchEvent> events, int64_t) {
            // Resume after the newest event delivered, not the header's revision: a replay from an old
            // revision comes in several responses that all carry the store's current revision.
            Changes out;
            for (const auto& ev : events) out.revision = std::max(out.revision, ev.kv.mod_revision);
            for (auto& ev : events) {
              auto id = id_of_key(config_.prefix, ev.kv.key);
              if (!id) continue;
              if (ev.type == etcd::WatchEvent::Type::del) {
                out.changes.push_back({*id, std::nullopt, ev.kv.mod_revision});
                continue;
              }
              auto info = decode_record(*id, ev.kv.value);
              if (!info) {
                spdlog::warn("etcd: ignoring {}: {}", ev.kv.key, info.error().detail);
                continue;
              }
              out.changes.push_back({*id, std::move(*info), ev.kv.mod_revision});
            }
            if (failing) spdlog::info("etcd: watching {} again from revision {}", prefix, revision + 1);
            failing = false;
            revision = std::max(revision, out.revision);
            if (!out.changes.empty()) caf::anon_send(membership_, std::move(out));
          },
          stop_, config_.watch_idle);
      if (end.why == etcd::WatchEnd::Why::stopped) break;
      if (end.why == etcd::WatchEnd::Why::compacted) {
        spdlog::warn("etcd: revision {} was compacted (oldest kept: {}); listing again", revision + 1,
                     end.compact_revision);
        break;
      }
      trouble("watch of " + prefix + " ended: " + end.error);
      sleep_for(config_.retry);
    }
  }
}

}  // namespace epd::actors::etcd_backend

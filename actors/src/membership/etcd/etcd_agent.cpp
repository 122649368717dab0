#include "etcd_agent.hpp"

#include <spdlog/spdlog.h>

#include "instance_record.hpp"

namespace epd::actors::etcd_backend {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

bool lease_not_found(const protocol::Error& e) {
  return e.detail.find("lease not found") != std::string::npos;
}

int64_t ms_since(clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(clock::now() - t).count();
}

}  // namespace

Agent::Agent(etcd::EtcdClient client, AgentConfig config, protocol::PeerInfo self, caf::actor membership)
    : client_(std::move(client)),
      stream_(client_.endpoints(), client_.timeout(), client_.traffic()),
      config_(std::move(config)),
      self_(std::move(self)),
      membership_(std::move(membership)) {}

Agent::~Agent() {
  stop();
}

void Agent::start() {
  session_ = std::thread([this] { run_session(); });
  if (config_.watch) watcher_ = std::thread([this] { run_watcher(); });
}

void Agent::stop(bool revoke) {
  {
    // Under the lock, so that a sleeper that has just found stop_ false cannot miss the wake-up.
    std::lock_guard lock(sleep_mu_);
    if (stop_.exchange(true)) return;
  }
  woken_.notify_all();
  if (session_.joinable()) session_.join();
  if (watcher_.joinable()) watcher_.join();
  if (int64_t lease = lease_.load(); revoke && lease != 0) {
    if (auto st = client_.revoke(lease); !st)
      spdlog::warn("etcd: could not revoke lease {} on shutdown ({}); our key goes when it expires", lease,
                   st.error().detail);
  }
}

bool Agent::sleep_for(milliseconds d) {
  // Woken by stop() at once, and otherwise not at all: a session renews every TTL/3, and a process of a
  // simulated fleet holds a thousand of them.
  std::unique_lock lock(sleep_mu_);
  return !woken_.wait_for(lock, d, [&] { return stop_.load(); });
}

void Agent::run_session() {
  const std::string key = instance_key(config_.prefix, self_.instance_id);
  const std::string record = encode_record(self_);
  const auto ttl = std::chrono::duration_cast<std::chrono::seconds>(config_.lease_ttl);
  const milliseconds renew_every = config_.lease_ttl / 3;
  bool failing = false;
  clock::time_point failing_since;
  auto trouble = [&](const std::string& what) {
    if (failing) return;
    failing = true;
    failing_since = clock::now();
    spdlog::warn("etcd: {}; serving with the membership we last saw, retrying every {} ms", what,
                 config_.retry.count());
    caf::anon_send(membership_, SessionNews{false, what});
  };
  while (!stop_.load()) {
    if (lease_.load() == 0) {
      auto lease = client_.grant(ttl);
      if (!lease) {
        trouble("cannot grant a lease: " + lease.error().detail);
        sleep_for(config_.retry);
        continue;
      }
      lease_.store(lease->id);
    }
    auto put = client_.put(key, record, lease_.load());
    if (!put) {
      if (lease_not_found(put.error())) {
        lease_.store(0);  // expired between grant and put: take a new one
        continue;
      }
      trouble("cannot put our record: " + put.error().detail);
      sleep_for(config_.retry);
      continue;
    }
    spdlog::info("etcd: registered as {} (incarnation {}) under lease {}{}", key, self_.incarnation,
                 lease_.load(),
                 failing ? " after " + std::to_string(ms_since(failing_since)) + " ms of trouble" : "");
    failing = false;
    caf::anon_send(membership_, SessionNews{true, ""});
    // Renew until etcd says the lease is gone; while etcd cannot be reached, keep trying faster.
    while (!stop_.load()) {
      if (!sleep_for(failing ? config_.retry : renew_every)) break;
      auto left = renew(lease_.load());
      if (!left) {
        trouble("cannot renew lease " + std::to_string(lease_.load()) + ": " + left.error().detail);
        continue;
      }
      if (*left == 0) {
        spdlog::warn("etcd: lease {} expired{}; registering again with a new lease", lease_.load(),
                     failing ? " while etcd was unreachable" : "");
        lease_.store(0);
        break;
      }
      if (failing) {
        spdlog::info("etcd: reachable again after {} ms; lease {} still held", ms_since(failing_since),
                     lease_.load());
        failing = false;
        caf::anon_send(membership_, SessionNews{true, ""});
      }
    }
  }
}

protocol::Result<int64_t> Agent::renew(int64_t lease) {
  // While the stream does not work, runs of renewals go through the gateway, and then the stream is tried
  // again: a way to etcd that carries no gRPC (an HTTP/1.1-only proxy) costs one timeout per run, and an
  // etcd too busy to answer a first stream in time is not given up on for good.
  constexpr int kFailuresBeforeGateway = 3, kGatewayRun = 30;
  if (gateway_left_ > 0) {
    --gateway_left_;
    return client_.keep_alive(lease);
  }
  auto left = stream_.keep_alive(lease);
  if (left) {
    stream_worked_ = true;
    stream_failures_ = 0;
    return left;
  }
  // Once the stream has worked, its failures are etcd's trouble, which the gateway shares.
  if (stream_worked_) return left;
  auto via_gateway = client_.keep_alive(lease);
  if (!via_gateway) return left;
  if (++stream_failures_ >= kFailuresBeforeGateway) {
    if (stream_failures_ == kFailuresBeforeGateway)
      spdlog::warn(
          "etcd: lease {} is renewed through the JSON gateway; the gRPC stream did not work {} times (last: "
          "{}); trying it again every {} renewals",
          lease, stream_failures_, left.error().detail, kGatewayRun);
    gateway_left_ = kGatewayRun;
  }
  return via_gateway;
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

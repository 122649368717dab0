#include "epd/etcd/lease_keeper.hpp"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

namespace epd::etcd {

using clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// The longest a round spends registering records (a grant and a put each) before it renews again.
constexpr milliseconds kRegisterFor{200};

bool lease_not_found(const protocol::Error& e) {
  return e.detail.find("lease not found") != std::string::npos;
}

int64_t ms_since(clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(clock::now() - t).count();
}

}  // namespace

struct LeaseKeeper::Record {
  std::string key, value;
  std::chrono::seconds ttl;
  milliseconds renew_every;
  News news;
  int64_t lease = 0;
  bool put = false;  // the record is in etcd under `lease`
  clock::time_point due;
  // In the round in flight. While it is, the keeper's thread alone touches the fields above (outside the
  // lock), and release() waits.
  bool busy = false;
  bool failing = false;  // a spell of trouble, said once
  clock::time_point failing_since;
};

LeaseKeeper::LeaseKeeper(EtcdClient client, milliseconds retry)
    : client_(std::move(client)),
      retry_(retry),
      stream_(client_.endpoints(), client_.timeout(), client_.traffic()) {
  thread_ = std::thread([this] { run(); });
}

LeaseKeeper::~LeaseKeeper() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

LeaseKeeper::Handle LeaseKeeper::keep(std::string key, std::string value, milliseconds ttl, News news) {
  Record r;
  r.key = std::move(key);
  r.value = std::move(value);
  r.ttl = std::max(std::chrono::seconds(1), std::chrono::duration_cast<std::chrono::seconds>(ttl));
  r.renew_every = std::max(ttl, milliseconds(1000)) / 3;  // never a zero period
  r.news = std::move(news);
  r.due = clock::now();
  Handle h;
  {
    std::lock_guard lock(mu_);
    h = next_++;
    records_.emplace(h, std::move(r));
  }
  changed_.notify_all();
  return h;
}

void LeaseKeeper::release(Handle handle, bool revoke) {
  int64_t lease = 0;
  {
    std::unique_lock lock(mu_);
    auto it = records_.find(handle);
    if (it == records_.end()) return;
    changed_.wait(lock, [&] { return !it->second.busy; });
    lease = it->second.lease;
    records_.erase(it);
  }
  if (!revoke || lease == 0) return;
  if (auto st = client_.revoke(lease); !st)
    spdlog::warn("etcd: could not revoke lease {} on shutdown ({}); our key goes when it expires", lease,
                 st.error().detail);
}

size_t LeaseKeeper::size() const {
  std::lock_guard lock(mu_);
  return records_.size();
}

uint64_t LeaseKeeper::batches() const {
  std::lock_guard lock(mu_);
  return batches_;
}

void LeaseKeeper::run() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const auto now = clock::now();
    auto next = clock::time_point::max();
    std::vector<Record*> to_register, to_renew;
    for (auto& [handle, r] : records_) {
      // When one record is due, the others due within a tenth of their renewal period go with it (a lease
      // renewed that early still has most of its TTL left); once together, they stay together.
      if (r.due <= now + r.renew_every / 10) {
        r.busy = true;
        (r.put ? to_renew : to_register).push_back(&r);
      } else {
        next = std::min(next, r.due);
      }
    }
    if (to_register.empty() && to_renew.empty()) {
      if (next == clock::time_point::max())
        changed_.wait(lock);
      else
        changed_.wait_until(lock, next);
      continue;
    }
    if (!to_renew.empty()) ++batches_;
    lock.unlock();
    renew_records(to_renew);  // first: a renewal must not wait behind a burst of joins
    register_records(to_register);
    lock.lock();
    for (auto* r : to_register) r->busy = false;
    for (auto* r : to_renew) r->busy = false;
    changed_.notify_all();
  }
}

namespace {

// Said once per spell of trouble, to the log and the record's owner.
void trouble(auto& r, const std::string& what, milliseconds retry) {
  if (r.failing) return;
  r.failing = true;
  r.failing_since = clock::now();
  spdlog::warn("etcd: {}; serving with the membership we last saw, retrying every {} ms", what,
               retry.count());
  r.news(false, what);
}

}  // namespace

void LeaseKeeper::register_records(const std::vector<Record*>& due) {
  // Once etcd could not be reached, the round's other records are not tried: each would wait out the
  // timeout in turn. They all try again after `retry`. A round registers for kRegisterFor at most (those
  // left stay due, for the next round), so that renewals keep their pace while hundreds join at once.
  const auto until = clock::now() + kRegisterFor;
  std::optional<std::string> unreachable;
  for (Record* rp : due) {
    Record& r = *rp;
    if (unreachable) {
      trouble(r, *unreachable, retry_);
      r.due = clock::now() + retry_;
      continue;
    }
    if (clock::now() >= until) break;
    r.due = clock::now() + retry_;
    if (r.lease == 0) {
      auto lease = client_.grant(r.ttl);
      if (!lease) {
        unreachable = "cannot grant a lease: " + lease.error().detail;
        trouble(r, *unreachable, retry_);
        continue;
      }
      r.lease = lease->id;
    }
    auto put = client_.put(r.key, r.value, r.lease);
    if (!put) {
      if (lease_not_found(put.error())) {
        r.lease = 0;  // expired between grant and put: a new one next round
        r.due = clock::now();
        continue;
      }
      unreachable = "cannot put our record: " + put.error().detail;
      trouble(r, *unreachable, retry_);
      continue;
    }
    spdlog::info("etcd: registered {} under lease {}{}", r.key, r.lease,
                 r.failing ? " after " + std::to_string(ms_since(r.failing_since)) + " ms of trouble" : "");
    r.failing = false;
    r.put = true;
    r.due = clock::now() + r.renew_every;
    r.news(true, "");
  }
}

void LeaseKeeper::renew_records(const std::vector<Record*>& due) {
  if (due.empty()) return;
  std::vector<int64_t> leases;
  leases.reserve(due.size());
  for (const Record* r : due) leases.push_back(r->lease);
  auto left = renew(leases);
  const auto now = clock::now();
  for (size_t i = 0; i < due.size(); ++i) {
    Record& r = *due[i];
    if (!left[i]) {
      trouble(r, "cannot renew lease " + std::to_string(r.lease) + ": " + left[i].error().detail, retry_);
      r.due = now + retry_;  // while etcd cannot be reached, keep trying faster
      continue;
    }
    if (*left[i] == 0) {
      spdlog::warn("etcd: lease {} of {} expired{}; registering again with a new lease", r.lease, r.key,
                   r.failing ? " while etcd was unreachable" : "");
      r.lease = 0;
      r.put = false;
      r.due = now;
      continue;
    }
    if (r.failing) {
      spdlog::info("etcd: reachable again after {} ms; lease {} of {} still held", ms_since(r.failing_since),
                   r.lease, r.key);
      r.failing = false;
      r.news(true, "");
    }
    r.due = now + r.renew_every;
  }
}

std::vector<Result<int64_t>> LeaseKeeper::renew(const std::vector<int64_t>& leases) {
  // While the stream does not work, runs of renewals go through the gateway, and then the stream is tried
  // again: a way to etcd that carries no gRPC (an HTTP/1.1-only proxy) costs one timeout per run, and an
  // etcd too busy to answer a first stream in time is not given up on for good.
  constexpr int kFailuresBeforeGateway = 3, kGatewayRun = 30;
  auto via_gateway = [&] {
    std::vector<Result<int64_t>> out;
    for (int64_t lease : leases) {
      // Once one fails (etcd cannot be reached), the others would each wait out the timeout: not tried.
      if (!out.empty() && !out.back()) {
        out.push_back(out.back().error());
        continue;
      }
      out.push_back(client_.keep_alive(lease));
    }
    return out;
  };
  auto all_failed = [&](const protocol::Error& e) { return std::vector<Result<int64_t>>(leases.size(), e); };
  if (gateway_left_ > 0) {
    --gateway_left_;
    return via_gateway();
  }
  auto streamed = stream_.keep_alive(leases);
  if (streamed) {
    stream_worked_ = true;
    stream_failures_ = 0;
    return {streamed->begin(), streamed->end()};
  }
  // Once the stream has worked, its failures are etcd's trouble, which the gateway shares.
  if (stream_worked_) return all_failed(streamed.error());
  auto gateway = via_gateway();
  if (!gateway.front()) return all_failed(streamed.error());
  if (++stream_failures_ >= kFailuresBeforeGateway) {
    if (stream_failures_ == kFailuresBeforeGateway)
      spdlog::warn(
          "etcd: leases are renewed through the JSON gateway; the gRPC stream did not work {} times (last: "
          "{}); trying it again every {} renewals",
          stream_failures_, streamed.error().detail, kGatewayRun);
    gateway_left_ = kGatewayRun;
  }
  return gateway;
}

}  // namespace epd::etcd

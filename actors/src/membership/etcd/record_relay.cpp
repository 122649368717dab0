#include "record_relay.hpp"

#include <algorithm>

namespace epd::actors::etcd_backend {

namespace {

bool needs_records(const protocol::PeerInfo& info) {
  return info.role != protocol::kRouterRole;  // routers watch etcd themselves
}

// FNV-1a: the same on every build and platform (std::hash is not), so that all routers agree.
uint64_t stable_hash(const std::string& s) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

size_t list_rank(const std::vector<std::string>& routers, const std::string& self, const std::string& id) {
  auto me = std::find(routers.begin(), routers.end(), self);
  if (me == routers.end()) return 0;
  const size_t n = routers.size();
  const size_t first = size_t(stable_hash(id) % n);
  return (size_t(me - routers.begin()) + n - first) % n;
}

std::vector<std::string> RecordMirror::serving() const {
  std::vector<std::string> out;
  for (const auto& r : routers_)
    if (!down_.count(r)) out.push_back(r);
  return out;
}

uint64_t RecordMirror::sent_up_to(const std::string& id) const {
  return list_rank(sent_by_, self_, id) == 0 ? since_ : 0;
}

void RecordMirror::keep_router(const std::string& id, const protocol::PeerInfo* info) {
  auto it = std::lower_bound(routers_.begin(), routers_.end(), id);
  const bool held = it != routers_.end() && *it == id;
  if (info && !needs_records(*info) && !held) routers_.insert(it, id);
  if ((!info || needs_records(*info)) && held) routers_.erase(it);
}

std::vector<std::string> RecordMirror::list(const Listing& listing) {
  records_.clear();
  routers_.clear();
  for (const auto& info : listing.peers) {
    records_[info.instance_id] = info;
    keep_router(info.instance_id, &info);
  }
  revision_ = since_ = history_since_ = listed_at_ = uint64_t(listing.revision);
  pending_.clear();
  history_.clear();
  fresh_.clear();
  sent_by_ = serving();
  std::vector<std::string> to;
  for (const auto& [id, info] : records_)
    if (needs_records(info)) to.push_back(info.control_endpoint);
  return to;
}

void RecordMirror::watch(const Changes& changes) {
  for (const auto& c : changes.changes) {
    pending_.push_back({c.id, uint64_t(c.revision), c.info});
    keep_router(c.id, c.info ? &*c.info : nullptr);
    auto it = records_.find(c.id);
    if (!c.info) {
      if (it != records_.end()) records_.erase(it);
      fresh_.erase(c.id);
      continue;
    }
    // A new instance, or a new process under the same id, holds no list: it gets the full one.
    if (it == records_.end() || it->second.incarnation != c.info->incarnation) fresh_.insert(c.id);
    records_[c.id] = *c.info;
  }
  revision_ = std::max(revision_, uint64_t(changes.revision));
}

RecordMirror::Flush RecordMirror::flush() {
  Flush out;
  out.delta.full = false;
  out.delta.since = since_;
  out.delta.revision = revision_;
  out.delta.changes = std::move(pending_);
  pending_.clear();
  const auto now_serving = serving();
  // Instances whose router stopped serving (or whose share moved) become ours. Their router had sent them
  // everything up to what its last heartbeat said, at least: the events since then are the catch-up.
  const bool moved = now_serving != sent_by_;
  std::optional<uint64_t> catch_up_since;
  if (moved) {
    uint64_t from = since_;
    for (const auto& r : sent_by_)
      if (r != self_) {
        auto it = router_sent_.find(r);
        from = std::min(from, it == router_sent_.end() ? 0 : it->second);
      }
    from = std::max(from, listed_at_);                  // every instance got our list then
    if (from >= history_since_) catch_up_since = from;  // else older than we keep: the full list instead
  }
  if (catch_up_since) {
    out.catch_up.full = false;
    out.catch_up.since = *catch_up_since;
    out.catch_up.revision = revision_;
    for (const auto& c : history_)
      if (c.revision > *catch_up_since) out.catch_up.changes.push_back(c);
    out.catch_up.changes.insert(out.catch_up.changes.end(), out.delta.changes.begin(),
                                out.delta.changes.end());
  }
  history_.insert(history_.end(), out.delta.changes.begin(), out.delta.changes.end());
  while (history_.size() > kHistory) {  // whole revisions only: a catch-up never starts inside one
    history_since_ = history_.front().revision;
    while (!history_.empty() && history_.front().revision == history_since_) history_.pop_front();
  }
  since_ = revision_;
  for (const auto& [id, info] : records_) {
    if (!needs_records(info)) continue;
    const size_t rank = list_rank(now_serving, self_, id);
    const bool adopted = rank == 0 && moved && list_rank(sent_by_, self_, id) != 0;
    // The full list goes to an instance new since the last flush, and to one that became ours when we no
    // longer keep the events its catch-up would start from.
    const bool needs_list = fresh_.count(id) > 0 || (adopted && !catch_up_since);
    if (!needs_list) {
      if (rank == 0) (adopted ? out.catch_up_to : out.delta_to).push_back(info.control_endpoint);
      continue;
    }
    if (rank > 0) {
      out.awaited.emplace_back(id, rank);
      continue;
    }
    out.full_to.push_back(info.control_endpoint);
    out.full_ids.push_back(id);
  }
  if (out.delta.changes.empty()) out.delta_to.clear();
  if (out.catch_up.changes.empty()) out.catch_up_to.clear();
  sent_by_ = now_serving;
  for (auto it = router_sent_.begin(); it != router_sent_.end();)  // routers etcd no longer holds
    it = std::binary_search(routers_.begin(), routers_.end(), it->first) ? std::next(it)
                                                                         : router_sent_.erase(it);
  fresh_.clear();
  return out;
}

protocol::Records RecordMirror::full() const {
  protocol::Records r;
  r.full = true;
  r.revision = revision_;
  r.changes.reserve(records_.size());
  for (const auto& [id, info] : records_) r.changes.push_back({id, revision_, info});
  return r;
}

const protocol::PeerInfo* RecordMirror::member(const std::string& id) const {
  auto it = records_.find(id);
  return it == records_.end() || !needs_records(it->second) ? nullptr : &it->second;
}

std::vector<std::string> RecordMirror::members() const {
  std::vector<std::string> ids;
  for (const auto& [id, info] : records_)
    if (needs_records(info)) ids.push_back(id);
  return ids;
}

RecordFollower::Step RecordFollower::take(const std::string& router, protocol::Records records) {
  Step step;
  if (records.revision <= at_) return step;  // nothing newer than what we hold (the other router's copy)
  if (records.full) {
    Listing l;
    l.revision = int64_t(records.revision);
    for (auto& c : records.changes)
      if (c.info) l.peers.push_back(std::move(*c.info));
    step.listing = std::move(l);
    at_ = records.revision;
    return step;
  }
  if (at_ == 0) return step;  // no list yet: it is on its way
  if (records.since > at_) {  // events between our revision and its start never reached us (yet)
    step.gap = true;
    ahead_.try_emplace(router, records.revision);
    return step;
  }
  Changes ch;
  ch.revision = int64_t(records.revision);
  // Events up to our revision are applied already (from the other router): replaying them in order would
  // end the same, at the cost of publishing them again.
  for (auto& c : records.changes)
    if (c.revision > at_) ch.changes.push_back({std::move(c.id), std::move(c.info), int64_t(c.revision)});
  at_ = records.revision;
  step.changes = std::move(ch);
  return step;
}

bool RecordFollower::short_of(const std::string& router, uint64_t sent) {
  if (at_ == 0 || sent <= at_) {  // nothing to compare before our first list; or we hold all it sent
    ahead_.erase(router);
    return false;
  }
  auto [it, first] = ahead_.try_emplace(router, sent);
  if (first || it->second <= at_) {  // news since its last heartbeat: give the other stream one interval
    it->second = sent;
    return false;
  }
  ahead_.erase(it);
  return true;
}

}  // namespace epd::actors::etcd_backend

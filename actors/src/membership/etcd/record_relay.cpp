#include "record_relay.hpp"

namespace epd::actors::etcd_backend {

namespace {

bool needs_records(const protocol::PeerInfo& info) {
  return info.role != "router";  // routers watch etcd themselves
}

}  // namespace

std::vector<std::string> RecordMirror::list(const Listing& listing) {
  records_.clear();
  for (const auto& info : listing.peers) records_[info.instance_id] = info;
  revision_ = since_ = uint64_t(listing.revision);
  pending_.clear();
  fresh_.clear();
  std::vector<std::string> to;
  for (const auto& [id, info] : records_)
    if (needs_records(info)) to.push_back(info.control_endpoint);
  return to;
}

void RecordMirror::watch(const Changes& changes) {
  for (const auto& c : changes.changes) {
    pending_.push_back({c.id, uint64_t(c.revision), c.info});
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
  since_ = revision_;
  for (const auto& [id, info] : records_) {
    if (!needs_records(info)) continue;
    if (!fresh_.count(id)) {
      out.delta_to.push_back(info.control_endpoint);
      continue;
    }
    out.full_to.push_back(info.control_endpoint);
    out.full_ids.push_back(id);
  }
  if (out.delta.changes.empty()) out.delta_to.clear();
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

RecordFollower::Step RecordFollower::take(const protocol::Records& records) {
  Step step;
  if (records.revision <= at_) return step;  // nothing newer than what we hold (the other router's copy)
  if (records.full) {
    Listing l;
    l.revision = int64_t(records.revision);
    for (const auto& c : records.changes)
      if (c.info) l.peers.push_back(*c.info);
    step.listing = std::move(l);
    at_ = records.revision;
    return step;
  }
  if (records.since > at_) {  // events between our revision and its start never reached us
    step.gap = true;
    return step;
  }
  Changes ch;
  ch.revision = int64_t(records.revision);
  // Events up to our revision are applied already (from the other router): replaying them in order would
  // end the same, at the cost of publishing them again.
  for (const auto& c : records.changes)
    if (c.revision > at_) ch.changes.push_back({c.id, c.info, int64_t(c.revision)});
  at_ = records.revision;
  step.changes = std::move(ch);
  return step;
}

}  // namespace epd::actors::etcd_backend

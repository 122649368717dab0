#include "epd/actors/membership/peer_directory.hpp"

namespace epd::actors {

PeerDirectory::Entry PeerDirectory::entry_of(const protocol::PeerInfo& peer) {
  Entry e{peer.role, peer.control_endpoint, peer.incarnation, nullptr, nullptr};
  if (peer.segment) e.segment = std::make_shared<const protocol::SegmentDescriptor>(*peer.segment);
  Common common{peer.kv_layout, peer.identity};
  for (const auto& c : commons_)
    if (*c == common) {
      e.common = c;
      return e;
    }
  e.common = std::make_shared<const Common>(std::move(common));
  if (commons_.size() >= max_commons)  // values no entry holds any more make room first
    std::erase_if(commons_, [](const auto& c) { return c.use_count() == 1; });
  if (commons_.size() < max_commons) commons_.push_back(e.common);
  return e;
}

protocol::PeerInfo PeerDirectory::info_of(const std::string& id, const Entry& e) {
  protocol::PeerInfo p;
  p.instance_id = id;
  p.role = e.role;
  p.control_endpoint = e.control_endpoint;
  p.incarnation = e.incarnation;
  if (e.segment) p.segment = *e.segment;
  p.kv_layout = e.common->kv_layout;
  p.identity = e.common->identity;
  return p;
}

std::vector<PeerDirectory::Change> PeerDirectory::replace(uint64_t version,
                                                          const std::vector<protocol::PeerInfo>& peers) {
  std::lock_guard lock(mu_);
  std::vector<Change> changes;
  if (version < version_) return changes;
  version_ = version;
  std::map<std::string, Entry> next;
  for (const auto& p : peers) next[p.instance_id] = entry_of(p);
  for (const auto& [id, old] : peers_) {
    auto it = next.find(id);
    if (it == next.end())
      changes.push_back({id, old.incarnation, 0, old.role});
    else if (it->second.incarnation != old.incarnation)
      changes.push_back({id, old.incarnation, it->second.incarnation, it->second.role});
  }
  for (const auto& [id, p] : next)
    if (!peers_.count(id)) changes.push_back({id, 0, p.incarnation, p.role});
  peers_ = std::move(next);
  drop_stale_dead_marks();
  return changes;
}

PeerDirectory::DeltaResult PeerDirectory::apply_delta(uint64_t version,
                                                      const std::vector<protocol::PeerInfo>& upserts,
                                                      const std::vector<std::string>& left) {
  std::lock_guard lock(mu_);
  DeltaResult out;
  if (version <= version_) return out;
  if (version != version_ + 1) {
    out.gap = true;
    return out;
  }
  version_ = version;
  for (const auto& id : left) {
    auto it = peers_.find(id);
    if (it == peers_.end()) continue;
    out.changes.push_back({id, it->second.incarnation, 0, it->second.role});
    peers_.erase(it);
  }
  for (const auto& p : upserts) {
    auto it = peers_.find(p.instance_id);
    if (it == peers_.end()) {
      out.changes.push_back({p.instance_id, 0, p.incarnation, p.role});
      peers_.emplace(p.instance_id, entry_of(p));
    } else {
      if (it->second.incarnation != p.incarnation)
        out.changes.push_back({p.instance_id, it->second.incarnation, p.incarnation, p.role});
      it->second = entry_of(p);
    }
  }
  drop_stale_dead_marks();
  return out;
}

void PeerDirectory::drop_stale_dead_marks() {
  std::erase_if(dead_, [&](const auto& d) {
    auto it = peers_.find(d.first);
    return it == peers_.end() || it->second.incarnation != d.second;
  });
}

std::vector<PeerDirectory::Change> PeerDirectory::forget_all() {
  std::lock_guard lock(mu_);
  std::vector<Change> changes;
  for (const auto& [id, p] : peers_) changes.push_back({id, p.incarnation, 0, p.role});
  peers_.clear();
  dead_.clear();
  observed_.clear();
  version_ = 0;
  return changes;
}

std::optional<protocol::PeerInfo> PeerDirectory::find_by_endpoint(const std::string& endpoint) const {
  std::lock_guard lock(mu_);
  for (const auto& [id, e] : peers_)
    if (e.control_endpoint == endpoint) return info_of(id, e);
  return std::nullopt;
}

std::optional<uint64_t> PeerDirectory::observe(const std::string& id, uint64_t incarnation) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end() || incarnation <= it->second.incarnation) return std::nullopt;
  uint64_t& seen = observed_[id];
  if (incarnation <= seen) return std::nullopt;
  seen = incarnation;
  return it->second.incarnation;
}

bool PeerDirectory::mark_dead(const std::string& id, uint64_t incarnation) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end() || it->second.incarnation != incarnation) return false;
  return dead_.emplace(id, incarnation).second;
}

bool PeerDirectory::revive(const std::string& id, uint64_t incarnation) {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  auto d = dead_.find(id);
  if (it == peers_.end() || it->second.incarnation != incarnation || d == dead_.end() ||
      d->second != incarnation)
    return false;
  dead_.erase(d);
  return true;
}

bool PeerDirectory::alive(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) return false;
  auto d = dead_.find(id);
  return d == dead_.end() || d->second != it->second.incarnation;
}

bool PeerDirectory::reaches(const std::string& id, uint64_t incarnation) const {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end() || it->second.incarnation != incarnation) return false;
  auto d = dead_.find(id);
  return d == dead_.end() || d->second != incarnation;
}

void PeerDirectory::upsert(const protocol::PeerInfo& peer) {
  std::lock_guard lock(mu_);
  peers_[peer.instance_id] = entry_of(peer);
}

std::optional<protocol::PeerInfo> PeerDirectory::find(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) return std::nullopt;
  return info_of(id, it->second);
}

bool PeerDirectory::lists(const protocol::PeerInfo& peer) const {
  std::lock_guard lock(mu_);
  auto it = peers_.find(peer.instance_id);
  if (it == peers_.end()) return false;
  const Entry& e = it->second;
  const bool same_segment = e.segment ? peer.segment && *e.segment == *peer.segment : !peer.segment;
  return e.incarnation == peer.incarnation && e.role == peer.role &&
         e.control_endpoint == peer.control_endpoint && same_segment &&
         e.common->kv_layout == peer.kv_layout && e.common->identity == peer.identity;
}

std::vector<protocol::PeerInfo> PeerDirectory::all() const {
  std::lock_guard lock(mu_);
  std::vector<protocol::PeerInfo> out;
  out.reserve(peers_.size());
  for (const auto& [id, e] : peers_) out.push_back(info_of(id, e));
  return out;
}

std::optional<std::string> PeerDirectory::endpoint_of(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) return std::nullopt;
  return it->second.control_endpoint;
}

std::string PeerDirectory::role_of(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  return it == peers_.end() ? "unknown" : it->second.role;
}

std::vector<protocol::PeerInfo> PeerDirectory::with_role(const std::string& role) const {
  std::lock_guard lock(mu_);
  std::vector<protocol::PeerInfo> out;
  for (const auto& [id, e] : peers_)
    if (e.role == role) out.push_back(info_of(id, e));
  return out;
}

std::map<std::string, uint64_t> PeerDirectory::incarnations() const {
  std::lock_guard lock(mu_);
  std::map<std::string, uint64_t> out;
  for (const auto& [id, p] : peers_) out.emplace(id, p.incarnation);
  return out;
}

bool PeerDirectory::lists_exactly(const std::map<std::string, uint64_t>& expected) const {
  std::lock_guard lock(mu_);
  if (peers_.size() != expected.size()) return false;
  auto e = expected.begin();
  for (const auto& [id, p] : peers_) {
    if (id != e->first || p.incarnation != e->second) return false;
    ++e;
  }
  return true;
}

uint64_t PeerDirectory::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

}  // namespace epd::actors

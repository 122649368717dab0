#include "epd/actors/peer_directory.hpp"

namespace epd::actors {

std::vector<PeerDirectory::Change> PeerDirectory::replace(uint64_t version,
                                                          const std::vector<protocol::PeerInfo>& peers) {
  std::lock_guard lock(mu_);
  std::vector<Change> changes;
  if (version < version_) return changes;
  version_ = version;
  std::map<std::string, protocol::PeerInfo> next;
  for (const auto& p : peers) next[p.instance_id] = p;
  for (const auto& [id, old] : peers_) {
    auto it = next.find(id);
    if (it == next.end()) changes.push_back({id, old.incarnation, 0});
    else if (it->second.incarnation != old.incarnation) changes.push_back({id, old.incarnation, it->second.incarnation});
  }
  for (const auto& [id, p] : next)
    if (!peers_.count(id)) changes.push_back({id, 0, p.incarnation});
  peers_ = std::move(next);
  return changes;
}

void PeerDirectory::upsert(const protocol::PeerInfo& peer) {
  std::lock_guard lock(mu_);
  peers_[peer.instance_id] = peer;
}

std::optional<protocol::PeerInfo> PeerDirectory::find(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) return std::nullopt;
  return it->second;
}

std::optional<std::string> PeerDirectory::endpoint_of(const std::string& id) const {
  std::lock_guard lock(mu_);
  auto it = peers_.find(id);
  if (it == peers_.end()) return std::nullopt;
  return it->second.control_endpoint;
}

std::vector<protocol::PeerInfo> PeerDirectory::with_role(const std::string& role) const {
  std::lock_guard lock(mu_);
  std::vector<protocol::PeerInfo> out;
  for (const auto& [id, p] : peers_)
    if (p.role == role) out.push_back(p);
  return out;
}

uint64_t PeerDirectory::version() const {
  std::lock_guard lock(mu_);
  return version_;
}

}  // namespace epd::actors

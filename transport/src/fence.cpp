#include "epd/transport/fence.hpp"

#include "host_id.hpp"

namespace epd::transport {

void FenceTable::add_region(uint64_t base, uint64_t length, uint64_t unit_bytes) {
  std::lock_guard lock(mu_);
  Fenced f{base, length, unit_bytes, {}};
  f.owner.assign((length + unit_bytes - 1) / unit_bytes, 0);
  regions_.push_back(std::move(f));
  any_.store(true);
}

uint64_t FenceTable::grant(uint64_t base, std::span<const uint64_t> units, uint64_t key) {
  std::lock_guard lock(mu_);
  size_t r = 0;
  while (r < regions_.size() && regions_[r].base != base) ++r;
  if (r == regions_.size()) return 0;
  while (key == 0 || (grants_.count(key) && grants_[key].revoked)) key = detail::random_u64();
  Grant& g = grants_[key];
  for (uint64_t u : units) {
    if (u >= regions_[r].owner.size()) continue;
    regions_[r].owner[u] = key;
    g.units.emplace_back(r, u);
  }
  return key;
}

bool FenceTable::revoke(uint64_t key) {
  std::lock_guard lock(mu_);
  auto it = grants_.find(key);
  if (it == grants_.end()) return true;
  Grant& g = it->second;
  for (auto [r, u] : g.units)
    if (regions_[r].owner[u] == key) regions_[r].owner[u] = 0;
  g.units.clear();
  if (g.landing == 0) {
    grants_.erase(it);
    return true;
  }
  if (!g.revoked) ++revoked_busy_;
  g.revoked = true;
  return false;
}

FenceTable::Admission FenceTable::admit(uint64_t key, uint64_t addr, uint64_t len) {
  if (!any_.load()) return Admission::unfenced;
  std::lock_guard lock(mu_);
  for (auto& f : regions_) {
    if (addr < f.base || addr - f.base >= f.length) continue;
    auto g = grants_.find(key);
    bool owned = key != 0 && g != grants_.end() && !g->second.revoked && len > 0;
    const uint64_t first = (addr - f.base) / f.unit;
    const uint64_t last = (addr - f.base + (len ? len - 1 : 0)) / f.unit;
    for (uint64_t u = first; owned && u <= last; ++u) owned = u < f.owner.size() && f.owner[u] == key;
    if (!owned) {
      ++refused_;
      return Admission::refused;
    }
    ++g->second.landing;
    return Admission::admitted;
  }
  return Admission::unfenced;
}

void FenceTable::landed(uint64_t key) {
  std::lock_guard lock(mu_);
  auto it = grants_.find(key);
  if (it == grants_.end()) return;
  if (--it->second.landing == 0 && it->second.revoked) grants_.erase(it);
}

FenceStats FenceTable::stats() const {
  std::lock_guard lock(mu_);
  return {grants_.size(), refused_, revoked_busy_};
}

}  // namespace epd::transport

#include "epd/transport/fence.hpp"

#include <algorithm>

#include "host_id.hpp"

namespace epd::transport {

void FenceTable::add_region(uint64_t base, uint64_t length, uint64_t unit_bytes) {
  std::lock_guard lock(mu_);
  Fenced f{base, length, unit_bytes, {}};
  f.owner.assign((length + unit_bytes - 1) / unit_bytes, 0);
  regions_.push_back(std::move(f));
  any_.store(true);
}

uint64_t FenceTable::grant(uint64_t base, std::span<const uint64_t> units, uint64_t key,
                           std::vector<uint64_t>* displaced) {
  std::lock_guard lock(mu_);
  size_t r = 0;
  while (r < regions_.size() && regions_[r].base != base) ++r;
  if (r == regions_.size()) return 0;
  while (key == 0 || (grants_.count(key) && grants_[key].revoked)) key = detail::random_u64();
  Grant& g = grants_[key];
  for (uint64_t u : units) {
    if (u >= regions_[r].owner.size()) continue;
    uint64_t& owner = regions_[r].owner[u];
    if (displaced && owner != 0 && owner != key &&
        std::find(displaced->begin(), displaced->end(), owner) == displaced->end())
      displaced->push_back(owner);
    owner = key;
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

std::vector<std::pair<uint64_t, uint64_t>> FenceTable::ranges(uint64_t key) const {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  std::lock_guard lock(mu_);
  auto it = grants_.find(key);
  if (key == 0 || it == grants_.end() || it->second.revoked) return out;
  for (auto [r, u] : it->second.units) {
    const Fenced& f = regions_[r];
    if (f.owner[u] != key) continue;  // taken by a later grant
    const uint64_t at = f.base + u * f.unit;
    out.emplace_back(at, std::min(f.unit, f.length - u * f.unit));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  size_t n = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    if (n > 0 && out[n - 1].first + out[n - 1].second == out[i].first)
      out[n - 1].second += out[i].second;
    else
      out[n++] = out[i];
  }
  out.resize(n);
  return out;
}

void FenceTable::count_refused() {
  std::lock_guard lock(mu_);
  ++refused_;
}

FenceStats FenceTable::stats() const {
  std::lock_guard lock(mu_);
  return {grants_.size(), refused_, revoked_busy_};
}

}  // namespace epd::transport

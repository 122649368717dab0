#include "cache/page_allocator.hpp"

namespace epd::actors {

PageAllocator::PageAllocator(uint32_t units) : used_(units, false), free_(units) {}

std::optional<std::vector<uint32_t>> PageAllocator::allocate(uint32_t n) {
  if (n > free_) return std::nullopt;
  std::vector<uint32_t> out;
  out.reserve(n);
  const uint32_t total = this->total();
  for (uint32_t k = 0; k < total && out.size() < n; ++k) {
    const uint32_t i = (hint_ + k) % total;
    if (!used_[i]) {
      used_[i] = true;
      out.push_back(i);
    }
  }
  free_ -= n;
  if (total) hint_ = (out.empty() ? hint_ : (out.back() + 1) % total);
  return out;
}

bool PageAllocator::free(std::span<const uint32_t> units) {
  for (size_t k = 0; k < units.size(); ++k) {
    if (units[k] >= total() || !used_[units[k]]) return false;
    for (size_t j = 0; j < k; ++j)
      if (units[j] == units[k]) return false;
  }
  for (uint32_t u : units) used_[u] = false;
  free_ += uint32_t(units.size());
  return true;
}

}  // namespace epd::actors

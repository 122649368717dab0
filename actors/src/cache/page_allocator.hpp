#pragma once
// Fixed-size unit allocator (KV pages, aux slots, embedding slots). Allocation is all-or-nothing, a unit is
// never handed out twice, and freeing a unit that is not allocated is refused (a double free would let two
// rooms share memory).
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace epd::actors {

class PageAllocator {
 public:
  explicit PageAllocator(uint32_t units);

  // n units, lowest indices first (keeps runs contiguous so writes merge); nullopt if fewer are free.
  std::optional<std::vector<uint32_t>> allocate(uint32_t n);
  // Returns false (and frees nothing) if any unit is out of range or not allocated.
  bool free(std::span<const uint32_t> units);

  uint32_t total() const { return uint32_t(used_.size()); }
  uint32_t free_count() const { return free_; }

 private:
  std::vector<bool> used_;
  uint32_t free_;
  uint32_t hint_ = 0;  // where the next search starts
};

}  // namespace epd::actors

#include "cache/prefix_index.hpp"

#include <xxhash.h>

#include <algorithm>

namespace epd::actors {

PrefixIndex::PrefixIndex(uint32_t block_tokens, uint32_t max_blocks)
    : block_(block_tokens), max_blocks_(max_blocks) {}

std::vector<uint64_t> PrefixIndex::blocks(std::span<const uint32_t> prompt,
                                          std::optional<uint32_t> image_token, uint64_t images) const {
  std::vector<uint64_t> out;
  if (!enabled()) return out;
  uint64_t chain = 0;
  for (size_t begin = 0; begin + block_ <= prompt.size(); begin += block_) {
    auto block = prompt.subspan(begin, block_);
    bool image = false;
    if (image_token)
      for (uint32_t t : block) image = image || t == *image_token;
    chain = XXH3_64bits_withSeed(block.data(), block.size_bytes(), chain ^ (image ? images : 0));
    out.push_back(chain);
  }
  return out;
}

namespace {

// The number of leading blocks for which `held(block)` holds, given that it holds for a prefix only.
template <class Held>
uint32_t leading(std::span<const uint64_t> blocks, Held&& held) {
  uint32_t lo = 0, hi = uint32_t(blocks.size());  // held for [0, lo), not for [hi, end)
  while (lo < hi) {
    const uint32_t mid = lo + (hi - lo) / 2;
    if (held(blocks[mid]))
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

}  // namespace

uint32_t PrefixIndex::matched(const std::string& instance, std::span<const uint64_t> blocks) const {
  auto it = instances_.find(instance);
  if (it == instances_.end()) return 0;
  return leading(blocks, [&](uint64_t b) { return holds(it->second, b); });
}

uint32_t PrefixIndex::deepest(std::span<const uint64_t> blocks) const {
  return leading(blocks, [&](uint64_t b) { return holders_.count(b) > 0; });
}

size_t PrefixIndex::holder_count(uint64_t block) const {
  auto it = holders_.find(block);
  return it == holders_.end() ? 0 : it->second.size();
}

uint32_t PrefixIndex::same_holders_from(std::span<const uint64_t> blocks, uint32_t depth) const {
  const size_t n = holder_count(blocks[depth - 1]);
  // Counts only grow towards the first block: the blocks with more than n holders are a prefix.
  return leading(blocks.first(depth), [&](uint64_t b) { return holder_count(b) > n; }) + 1;
}

void PrefixIndex::drop_holder(uint64_t block, uint32_t slot) {
  auto it = holders_.find(block);
  if (it == holders_.end()) return;
  auto& v = it->second;
  if (auto s = std::find(v.begin(), v.end(), slot); s != v.end()) {
    *s = v.back();
    v.pop_back();
  }
  if (v.empty()) holders_.erase(it);
}

void PrefixIndex::forget(const std::string& instance) {
  auto it = instances_.find(instance);
  if (it == instances_.end()) return;
  for (uint64_t b : it->second.lru) drop_holder(b, it->second.slot);
  instances_.erase(it);
}

void PrefixIndex::insert(const std::string& instance, std::span<const uint64_t> blocks) {
  if (!enabled() || blocks.empty()) return;
  auto [hit, added] = instances_.try_emplace(instance);
  Held& h = hit->second;
  if (added) {
    auto [slot, fresh] = slots_.try_emplace(instance, uint32_t(names_.size()));
    if (fresh) names_.push_back(instance);
    h.slot = slot->second;
  }
  // Deepest first, so a shared prefix ends up more recent than any one continuation of it.
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    if (auto found = h.index.find(*b); found != h.index.end()) {
      h.lru.splice(h.lru.begin(), h.lru, found->second);
      continue;
    }
    h.lru.push_front(*b);
    h.index.emplace(*b, h.lru.begin());
    holders_[*b].push_back(h.slot);
  }
  while (h.lru.size() > max_blocks_) {
    drop_holder(h.lru.back(), h.slot);
    h.index.erase(h.lru.back());
    h.lru.pop_back();
  }
}

size_t PrefixIndex::size(const std::string& instance) const {
  auto it = instances_.find(instance);
  return it == instances_.end() ? 0 : it->second.lru.size();
}

}  // namespace epd::actors

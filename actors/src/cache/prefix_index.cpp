#include "cache/prefix_index.hpp"

#include <xxhash.h>

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

uint32_t PrefixIndex::matched(const std::string& instance, std::span<const uint64_t> blocks) const {
  auto it = instances_.find(instance);
  if (it == instances_.end()) return 0;
  uint32_t n = 0;
  while (n < blocks.size() && it->second.index.count(blocks[n])) ++n;
  return n;
}

void PrefixIndex::insert(const std::string& instance, std::span<const uint64_t> blocks) {
  if (!enabled() || blocks.empty()) return;
  Held& h = instances_[instance];
  // Deepest first, so a shared prefix ends up more recent than any one continuation of it.
  for (auto b = blocks.rbegin(); b != blocks.rend(); ++b) {
    if (auto found = h.index.find(*b); found != h.index.end()) {
      h.lru.splice(h.lru.begin(), h.lru, found->second);
      continue;
    }
    h.lru.push_front(*b);
    h.index.emplace(*b, h.lru.begin());
  }
  while (h.lru.size() > max_blocks_) {
    h.index.erase(h.lru.back());
    h.lru.pop_back();
  }
}

size_t PrefixIndex::size(const std::string& instance) const {
  auto it = instances_.find(instance);
  return it == instances_.end() ? 0 : it->second.lru.size();
}

}  // namespace epd::actors

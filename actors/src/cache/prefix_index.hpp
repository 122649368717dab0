#pragma once
// The router's guess of what each instance's prefix cache holds, for cache-aware placement: the chained
// hashes of the whole blocks of every prompt it placed there, least recently used out beyond a bound per
// instance (sglang's cache-aware router keeps the same kind of approximate tree). It is never trusted for
// correctness: an instance checks its own exact keys (docs/caches.md), so a wrong guess, a collision or a
// lost entry costs a cache miss, nothing more. Owned by the router actor (not thread-safe).
//
// What an instance holds is prefix-closed: a block is always more recent than every later block of its
// chain (insert touches a prompt's blocks deepest first, and every prompt holding a block holds the ones
// before it), so eviction takes the deepest first. matched() and deepest() rely on it to binary-search.
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace epd::actors {

class PrefixIndex {
 public:
  // block_tokens: tokens per block (the model's page size); max_blocks: per instance, 0 = off.
  PrefixIndex(uint32_t block_tokens, uint32_t max_blocks);

  bool enabled() const { return max_blocks_ > 0 && block_ > 0; }
  uint32_t block_tokens() const { return block_; }
  // The prompt's whole blocks, each hash covering every token before its end; a block with an image row
  // also covers `images` (a hash of the request's image bytes), so other pictures make other blocks.
  std::vector<uint64_t> blocks(std::span<const uint32_t> prompt, std::optional<uint32_t> image_token,
                               uint64_t images) const;
  // How many leading blocks `instance` is believed to hold: O(log blocks).
  uint32_t matched(const std::string& instance, std::span<const uint64_t> blocks) const;
  // How many leading blocks some instance is believed to hold: O(log blocks).
  uint32_t deepest(std::span<const uint64_t> blocks) const;
  // Calls `f(instance)` for each instance believed to hold `block`, unless more than `limit` do: then it
  // calls nothing and returns false.
  template <class F>
  bool for_each_holder(uint64_t block, size_t limit, F&& f) const {
    auto it = holders_.find(block);
    if (it == holders_.end()) return true;
    if (it->second.size() > limit) return false;
    for (uint32_t slot : it->second) f(names_[slot]);
    return true;
  }
  size_t holder_count(uint64_t block) const;
  // The smallest j in [1, depth] whose block j-1 has as many holders as block depth-1. Holders nest (each
  // instance's blocks are prefix-closed), so blocks j-1 .. depth-1 all have the same holders.
  uint32_t same_holders_from(std::span<const uint64_t> blocks, uint32_t depth) const;
  // The instance will hold these blocks (it was given the prompt): they become its most recently used.
  void insert(const std::string& instance, std::span<const uint64_t> blocks);
  // The instance restarted or left: its cache is gone.
  void forget(const std::string& instance);
  size_t size(const std::string& instance) const;

 private:
  struct Held {
    uint32_t slot = 0;        // its index in names_
    std::list<uint64_t> lru;  // most recently used first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index;
  };
  bool holds(const Held& h, uint64_t block) const { return h.index.count(block) > 0; }
  void drop_holder(uint64_t block, uint32_t slot);

  uint32_t block_;
  uint32_t max_blocks_;
  std::unordered_map<std::string, Held> instances_;
  // Who holds each block (by slot: an instance keeps its slot, and its name, for the router's lifetime).
  std::unordered_map<uint64_t, std::vector<uint32_t>> holders_;
  std::vector<std::string> names_;
  std::unordered_map<std::string, uint32_t> slots_;
};

}  // namespace epd::actors

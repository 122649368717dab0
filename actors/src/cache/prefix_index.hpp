#pragma once
// The router's guess of what each instance's prefix cache holds, for cache-aware placement: the chained
// hashes of the whole blocks of every prompt it placed there, least recently used out beyond a bound per
// instance (sglang's cache-aware router keeps the same kind of approximate tree). It is never trusted for
// correctness: an instance checks its own exact keys (docs/caches.md), so a wrong guess, a collision or a
// lost entry costs a cache miss, nothing more. Owned by the router actor (not thread-safe).
#include <cstdint>
#include <list>
#include <map>
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
  // How many leading blocks `instance` is believed to hold.
  uint32_t matched(const std::string& instance, std::span<const uint64_t> blocks) const;
  // The instance will hold these blocks (it was given the prompt): they become its most recently used.
  void insert(const std::string& instance, std::span<const uint64_t> blocks);
  // The instance restarted or left: its cache is gone.
  void forget(const std::string& instance) { instances_.erase(instance); }
  size_t size(const std::string& instance) const;

 private:
  struct Held {
    std::list<uint64_t> lru;  // most recently used first
    std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index;
  };
  uint32_t block_;
  uint32_t max_blocks_;
  std::map<std::string, Held> instances_;
};

}  // namespace epd::actors

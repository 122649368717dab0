#pragma once
// A bounded cache of image embeddings by content hash (the EPD paper's encoder cache), least recently used
// out first, bounded by the bytes it holds. The encoder keeps one so an image seen before is not encoded
// again; prefill keeps one so embeddings it still holds are not transferred again.
//
// An entry a reader uses is pinned (`Pin`): eviction skips it, so its bytes are never freed under the
// reader; when nothing unpinned is left to evict, an insert is refused rather than going over the bound.
// Owned by one actor (not thread-safe); its counters are atomics a scrape reads from another thread.
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "epd/actors/cache/content_hash.hpp"

namespace epd::actors {

// What the cache did, for the metrics (docs/metrics.md, "Embedding cache").
struct EmbeddingCacheStats {
  std::atomic<uint64_t> capacity_bytes{0};
  std::atomic<uint64_t> hits{0};
  std::atomic<uint64_t> misses{0};
  std::atomic<uint64_t> bytes_saved{0};  // bytes of the entries found (not encoded / not transferred again)
  std::atomic<uint64_t> inserts{0};
  std::atomic<uint64_t> refused{0};  // inserts that did not fit: larger than the cache, or the rest pinned
  std::atomic<uint64_t> evictions{0};
  std::atomic<uint64_t> bytes{0};  // held now
  std::atomic<uint64_t> entries{0};
  // Embedding transfers E->P that did not happen because prefill held the embeddings (counted by the
  // role: encoder, a write it skipped; prefill, a pull it answered from its cache).
  std::atomic<uint64_t> transfers_skipped{0};
};

class EmbeddingCache {
  struct Entry {
    ContentHash hash;
    std::vector<uint8_t> bytes;
    uint32_t tokens = 0;
    uint32_t pins = 0;
  };
  using List = std::list<Entry>;  // most recently used first

 public:
  // A found entry, held in the cache while this lives. Must not outlive the cache.
  class Pin {
   public:
    Pin(Pin&& o) noexcept : cache_(o.cache_), it_(o.it_) { o.cache_ = nullptr; }
    Pin& operator=(Pin&&) = delete;
    Pin(const Pin&) = delete;
    ~Pin() {
      if (cache_) --it_->pins;
    }
    std::span<const uint8_t> bytes() const { return it_->bytes; }
    uint32_t tokens() const { return it_->tokens; }

   private:
    friend class EmbeddingCache;
    Pin(EmbeddingCache* cache, List::iterator it) : cache_(cache), it_(it) { ++it_->pins; }
    EmbeddingCache* cache_;
    List::iterator it_;
  };

  // capacity_bytes 0: disabled (finds nothing, stores nothing, counts nothing).
  explicit EmbeddingCache(uint64_t capacity_bytes, std::shared_ptr<EmbeddingCacheStats> stats =
                                                       std::make_shared<EmbeddingCacheStats>());
  EmbeddingCache(const EmbeddingCache&) = delete;
  EmbeddingCache& operator=(const EmbeddingCache&) = delete;

  bool enabled() const { return capacity_ > 0; }
  // Counts a hit (and its bytes as saved) or a miss; a hit becomes the most recently used and stays pinned
  // while the returned Pin lives.
  std::optional<Pin> find(const ContentHash& hash);
  // Stores a copy of `bytes` unless the hash is held already (then it only becomes the most recently used).
  // Evicts least recently used unpinned entries to make room; false when it cannot fit.
  bool insert(const ContentHash& hash, std::span<const uint8_t> bytes, uint32_t tokens);
  // Whether the hash is held, without counting or reordering anything (tests, logs).
  bool contains(const ContentHash& hash) const { return index_.count(hash) > 0; }
  uint64_t bytes() const { return bytes_; }
  size_t size() const { return index_.size(); }
  const std::shared_ptr<EmbeddingCacheStats>& stats() const { return stats_; }

 private:
  struct HashOf {
    size_t operator()(const ContentHash& h) const noexcept;
  };
  void publish();

  uint64_t capacity_;
  uint64_t bytes_ = 0;
  List lru_;
  std::unordered_map<ContentHash, List::iterator, HashOf> index_;
  std::shared_ptr<EmbeddingCacheStats> stats_;
};

}  // namespace epd::actors

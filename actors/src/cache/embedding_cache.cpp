#include "epd/actors/cache/embedding_cache.hpp"

#include <cstring>

namespace epd::actors {

size_t EmbeddingCache::HashOf::operator()(const ContentHash& h) const noexcept {
  size_t v;  // the key is a cryptographic hash already: any of its words is a good bucket hash
  std::memcpy(&v, h.data(), sizeof v);
  return v;
}

EmbeddingCache::EmbeddingCache(uint64_t capacity_bytes, std::shared_ptr<EmbeddingCacheStats> stats)
    : capacity_(capacity_bytes), stats_(std::move(stats)) {
  stats_->capacity_bytes = capacity_;
  publish();
}

std::optional<EmbeddingCache::Pin> EmbeddingCache::find(const ContentHash& hash) {
  if (!enabled()) return std::nullopt;
  auto found = index_.find(hash);
  if (found == index_.end()) {
    ++stats_->misses;
    return std::nullopt;
  }
  lru_.splice(lru_.begin(), lru_, found->second);  // iterators stay valid
  ++stats_->hits;
  stats_->bytes_saved += found->second->bytes.size();
  return Pin(this, found->second);
}

bool EmbeddingCache::insert(const ContentHash& hash, std::span<const uint8_t> bytes, uint32_t tokens) {
  if (!enabled()) return false;
  if (auto found = index_.find(hash); found != index_.end()) {
    lru_.splice(lru_.begin(), lru_, found->second);
    return true;
  }
  // Pick the least recently used unpinned entries that make room; evict only if they are enough.
  std::vector<List::iterator> victims;
  uint64_t freed = 0;
  if (bytes.size() <= capacity_) {
    for (auto it = lru_.end(); bytes_ - freed + bytes.size() > capacity_ && it != lru_.begin();) {
      --it;
      if (it->pins > 0) continue;
      victims.push_back(it);
      freed += it->bytes.size();
    }
  }
  if (bytes.size() > capacity_ || bytes_ - freed + bytes.size() > capacity_) {
    ++stats_->refused;
    return false;
  }
  for (auto it : victims) {
    bytes_ -= it->bytes.size();
    index_.erase(it->hash);
    lru_.erase(it);
    ++stats_->evictions;
  }
  lru_.push_front(Entry{hash, std::vector<uint8_t>(bytes.begin(), bytes.end()), tokens, 0});
  index_.emplace(hash, lru_.begin());
  bytes_ += bytes.size();
  ++stats_->inserts;
  publish();
  return true;
}

void EmbeddingCache::publish() {
  stats_->bytes = bytes_;
  stats_->entries = index_.size();
}

}  // namespace epd::actors
